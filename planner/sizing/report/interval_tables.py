"""The 90% intervals of `planner size --intervals N` as table rows and notes (terminal, report.md/html, JSON)."""

from __future__ import annotations

import statistics

from planner.sizing.search import Result, SizingResult


def varies_short(iv: dict) -> str:
    return "seeds and coefficients" if iv["coefficients_drawn"] else "seeds only (no coefficient uncertainty known)"


INTERVAL_HEADERS = (
    "candidate", "rests on", "load / replica", "capacity / replica", "replicas needed", "p50 TTFT ms",
    "p99 TTFT ms", "p50 TPOT ms", "p99 TPOT ms", "p99 E2E ms", "SLOs met (share of draws)", "draws vary",
)  # fmt: skip


def interval_text(v: dict | None, digits: int = 1) -> str:
    """median [5%-95%]"""
    if v is None or v["median"] is None:
        return "-"
    return f"{v['median']:,.{digits}f} [{v['low']:,.{digits}f}-{v['high']:,.{digits}f}]"


def interval_results(out: SizingResult) -> list[Result]:
    """The candidates with intervals: the recommendation first, then the runner-ups (intervals.interval_picks)."""
    return out.interval_picks


def interval_row(r: Result, unit: str) -> list[str]:
    iv = r.intervals
    lat = iv["latency_ms"]
    slo = [
        f"{s['metric'].removesuffix('_ms').upper()} {s['stat']} <= {s['bound_ms']:g}: "
        + ("n/a" if s["probability_met"] is None else f"{s['probability_met']:.0%}")
        for s in iv["slo"]
    ]
    slo.append(f"all, steady: {iv['probability_all_met']:.0%}")
    replicas = "-"
    need = iv["replicas_needed"]
    if need:
        low, high = need["low"], need["high"]
        if low is None:
            replicas = "none enough"
        else:
            replicas = str(low) if low == high else f"{low}-{high}" if high else f"{low} or more"
        notes = []
        if iv["probability_replicas_suffice"] is not None:
            notes.append(f"{r.evaluation.replicas} enough in {iv['probability_replicas_suffice']:.0%}")
        if need["share_none_enough"]:
            notes.append(f"no count enough in {need['share_none_enough']:.0%}")
        replicas += f" ({'; '.join(notes)})" if notes else ""
    digits = 0 if unit == "users" else 2
    capacity = (
        "-" if iv["capacity_per_replica"] is None else f"{interval_text(iv['capacity_per_replica'], digits)} {unit}"
    )
    if iv["capacity_searches_open"]:
        capacity += f" ({iv['capacity_searches_open']} of {iv['runs']} draws: at least, out of probes)"
    return [
        r.candidate.label,
        r.candidate.provenance_kind,
        f"{iv['load']:,.3g} {'user' if unit == 'users' and iv['load'] == 1 else unit} ({iv['at']})",
        capacity,
        replicas,
        *(interval_text(lat[k]) for k in ("p50_ttft", "p99_ttft", "p50_tpot", "p99_tpot", "p99_e2el")),
        "; ".join(slo),
        varies_short(iv),
    ]


def interval_notes(out: SizingResult) -> list[str]:
    """Where the intervals come from, and what they cost."""
    q = out.question
    n = out.interval_runs
    seed = q.scenario.workload.seed
    lines = [
        (
            f"each figure is median [5%-95%] over {n} runs per candidate: workload seeds {seed}..{seed + n - 1}, each"
            " with one draw of the cost-model coefficients from the std its provenance carries"
        ),
        (
            "latencies and SLO shares: one replica at the same load as the table's figures, every request run;"
            f" capacity: per draw, the same search as the nominal one (to {q.search.probe.tolerance:.0%}, at most"
            f" {q.search.probe.max_probes} runs) started at the nominal capacity, stepping by the tolerance and"
            " squaring the step after each run, under the drawn coefficients' analytic bound; replicas needed:"
            " from each draw's capacity, for the demand with headroom"
        ),
    ]
    drawn: dict[str, set[str]] = {}
    for r in interval_results(out):
        drawn.setdefault(r.candidate.provenance_kind, set()).update(r.intervals["coefficients_drawn"])
    if drawn.get("calibrated"):
        lines.append(
            f"calibrated: draws of {', '.join(sorted(drawn['calibrated']))} from the fit's standard errors, the"
            " coefficients' statistical uncertainty; the cost model's structural error against measured engines"
            " is in docs/fidelity.md, not in the interval"
        )
    if drawn.get("transferred"):
        lines.append(
            f"transferred: draws of {', '.join(sorted(drawn['transferred']))} from the leave-one-GPU-out spread"
            " of the transfer (the error measured when a profiled GPU was predicted from the others)"
        )
    if any(not r.intervals["coefficients_drawn"] for r in interval_results(out)):
        lines.append(
            "seeds only: spec-sheet coefficients (or a profile without a std) carry no uncertainty; their"
            " intervals vary the workload only, and the model's own error is unknown, not zero"
        )
    median = statistics.median(out.interval_simulation_wall_s) if out.interval_simulation_wall_s else 0.0
    lines.append(
        f"{len(interval_results(out))} candidates x {n} draws = {out.interval_simulations:,} simulations"
        f" (median {median:.2f} s); {out.interval_wall_s:.1f} s wall"
    )
    return lines
