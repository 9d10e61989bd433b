"""The answer: candidates that meet the SLOs at the demand, the Pareto front (cost vs p99 latency vs
capacity), the recommendation, the runner-ups and why they lost; when none meets, how close each GPU came."""

from __future__ import annotations

from dataclasses import dataclass

from planner.sizing.search import Result, SizingResult


@dataclass(frozen=True)
class Ranking:
    feasible: list[Result]  # cheapest first (ties: lower p99 E2E, then higher capacity)
    front: list[Result]  # not beaten on cost, p99 E2E and capacity per replica all at once
    recommended: Result | None
    runner_ups: list[tuple[Result, str]]  # the best of each other GPU, with why it lost
    cheapest_to_buy: Result | None
    closest: list[Result]  # when nothing meets: per GPU, the candidate that came closest


def p99_e2el_ms(r: Result) -> float:
    p = r.evaluation.at_demand if r.evaluation else None
    v = p.latency_ms["p99_e2el"] if p else None
    return float("inf") if v is None else v


def rank(out: SizingResult) -> Ranking:
    # Cheapest first; at equal cost the lower p99 E2E, then the larger capacity (more room to grow): so the
    # first is always on the Pareto front.
    feasible = sorted(
        (r for r in out.results if r.meets),
        key=lambda r: (r.objective_usd_per_month, p99_e2el_ms(r), -r.evaluation.capacity.load),
    )
    front = [r for r in feasible if not any(_dominates(o, r) for o in feasible if o is not r)]
    best = feasible[0] if feasible else None
    runner_ups, seen = [], {best.candidate.gpu.name} if best else set()
    for r in feasible[1:]:
        if r.candidate.gpu.name in seen:
            continue
        seen.add(r.candidate.gpu.name)
        runner_ups.append((r, _why_lost(r, best)))
    buyable = [r for r in feasible if r.costs.purchase_usd_per_month is not None]
    cheapest_to_buy = min(buyable, key=lambda r: r.costs.purchase_usd_per_month) if buyable else None
    return Ranking(feasible, front, best, runner_ups, cheapest_to_buy, [] if feasible else _closest(out))


def _dominates(a: Result, b: Result) -> bool:
    ka = (a.objective_usd_per_month, p99_e2el_ms(a), -a.evaluation.capacity.load)
    kb = (b.objective_usd_per_month, p99_e2el_ms(b), -b.evaluation.capacity.load)
    return all(x <= y for x, y in zip(ka, kb)) and ka != kb


def _why_lost(r: Result, best: Result) -> str:
    extra = r.objective_usd_per_month - best.objective_usd_per_month
    if best.objective_usd_per_month > 0:
        why = f"costs ${extra:,.0f}/month more (+{extra / best.objective_usd_per_month:.0%})"
    else:  # a GPU priced at $0 (one already owned): no share of nothing
        why = f"costs ${extra:,.0f}/month more (the best costs nothing)"
    if p99_e2el_ms(r) < p99_e2el_ms(best):
        why += f" for a lower p99 E2E ({p99_e2el_ms(r):,.0f} vs {p99_e2el_ms(best):,.0f} ms)"
    return why


def _closest(out: SizingResult) -> list[Result]:
    """Per GPU, the simulated candidate with the smallest worst SLO ratio (value / bound)."""
    by_gpu: dict[str, tuple[float, Result]] = {}
    for r in out.evaluated:
        ratio = worst_ratio(r)
        gpu = r.candidate.gpu.name
        if gpu not in by_gpu or ratio < by_gpu[gpu][0]:
            by_gpu[gpu] = (ratio, r)
    return [r for _, r in sorted(by_gpu.values(), key=lambda t: t[0])]


def worst_ratio(r: Result) -> float:
    """How far the candidate's lightest-load run is from its SLOs: max value / bound (1 = on the bound)."""
    p = r.evaluation.at_demand or r.evaluation.capacity.lightest
    ratios = [v / b for _, _, b, v, _ in p.checks if v is not None]
    return max(ratios, default=float("inf"))
