"""Aggregated against units of two pools (prefill/decode, length-routed) in the sizing report: the units' table,
which topology wins, by how much and why, and the winning unit's serve lines (planner/sizing/topology.py computes
them)."""

from __future__ import annotations

from planner.sizing.rank import Ranking
from planner.sizing.report.interval_tables import interval_text
from planner.sizing.topology import TopologyComparison, UnitResult

HEADERS = (
    "unit",
    "GPUs/unit",
    "capacity/unit",
    "units",
    "GPUs",
    "$/month",
    "p99 TTFT ms",
    "p99 TPOT ms",
    "pull p50 ms",
    "fails first above capacity on",
)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:,.0f}"


def unit_row(r: UnitResult, unit: str) -> list[str]:
    ev, u = r.evaluation, r.unit
    at = ev.at_demand
    detail = ev.detail or {}
    capacity = "none" if ev.capacity.load <= 0 else f"{ev.capacity.load:,.3g} {unit}"
    if ev.capacity.lower_bound:
        capacity = ">= " + capacity
    limited = fails_first(ev.capacity, unit)
    return [
        u.label,
        str(u.num_gpus()),
        capacity,
        "-" if ev.units is None else str(ev.units),
        "-" if ev.units is None else str(ev.units * u.num_gpus()),
        _usd(r.objective_usd_per_month),
        _ms(at.latency_ms["p99_ttft"] if at else None),
        _ms(at.latency_ms["p99_tpot"] if at else None),
        _ms(detail.get("median_transfer_ms")),
        limited + ("" if r.meets or at is None else " (misses the SLOs at the demand)"),
    ]


def fails_first(capacity, unit: str) -> str:
    """What the lightest failing probe above the capacity failed on: the binding limit of the unit."""
    above = [p for p in capacity.probes if p.load > capacity.load and not p.met]
    if not above:
        return "-"
    p = min(above, key=lambda p: p.load)
    at = f"at {p.load:,.3g} {unit}"
    if p.saturated:
        return f"saturated {at} (its queue grows)"
    missed = [
        f"{metric.removesuffix('_ms').upper()} {stat} {value:,.1f} ms > {bound:g}"
        for metric, stat, bound, value, met in p.checks
        if met is False
    ]
    if missed:
        return f"{', '.join(missed)} {at}"
    return f"{p.stopped} {at}" if p.stopped else f"fails {at}"


def verdict(c: TopologyComparison, ranking: Ranking) -> str:
    """Which topology wins, by how much, and why."""
    agg = ranking.recommended
    best = c.best
    if best is None and agg is None:
        return "neither topology meets the SLOs at the demand"
    if best is None:
        if any(why.startswith("cannot win") for _, why in c.pruned):
            return (
                f"aggregated wins: {agg.candidate.label} x{agg.evaluation.replicas}"
                f" {_usd(agg.objective_usd_per_month)}/month; no {_units_word(c)} can cost less (each one's floor,"
                " the units its throughput bound needs, is at or above it) or meets the SLOs"
            )
        return f"aggregated ({agg.candidate.label}): no {_units_word(c)} meets the SLOs at the demand"
    why = _why(best)
    kind = best.unit.kind
    if agg is None or agg.objective_usd_per_month is None:
        return f"{kind} ({best.unit.label}, {_usd(best.objective_usd_per_month)}/month): no aggregated candidate meets the SLOs; {why}"
    a, b = agg.objective_usd_per_month, best.objective_usd_per_month
    at = agg.evaluation.at_demand
    agg_text = (
        f"aggregated {agg.candidate.label} x{agg.evaluation.replicas} {_usd(a)}/month"
        f" (p99 TTFT {_ms(at.latency_ms['p99_ttft'])} ms, TPOT {_ms(at.latency_ms['p99_tpot'])} ms)"
    )
    dis_text = f"{kind} {best.unit.label} x{best.evaluation.units} {_usd(b)}/month ({why})"
    if b < a:
        return f"{kind} wins by {1 - b / a:.0%}: {dis_text} against {agg_text}"
    if b > a:
        return f"aggregated wins by {1 - a / b:.0%}: {agg_text} against {dis_text}"
    return f"a tie: {agg_text}; {dis_text}"


def _units_word(c: TopologyComparison) -> str:
    """What the comparison's units are, in words: 'prefill/decode unit', 'length-routed unit', or 'unit'."""
    if c.kinds == {"disaggregated"}:
        return "prefill/decode unit"
    return "length-routed unit" if c.kinds == {"length-routed"} else "unit"


def title(c: TopologyComparison) -> str:
    """The section's heading: what the aggregated candidates are weighed against."""
    if c.kinds == {"length-routed"}:
        return "Aggregated against length-routed"
    return (
        "Aggregated against disaggregated" if c.kinds == {"disaggregated"} else "Aggregated against units of two pools"
    )


def _why(r: UnitResult) -> str:
    at, detail = r.evaluation.at_demand, r.evaluation.detail or {}
    if r.unit.kind == "length-routed":
        threshold = r.unit.scenario.fleet.router.threshold_tokens
        return (
            f"p99 TTFT {_ms(at.latency_ms['p99_ttft'])} ms, p99 TPOT {_ms(at.latency_ms['p99_tpot'])} ms; prompts up to"
            f" {threshold:,} tokens to the short pool, busy {detail['short_busy_share']:.0%}, the rest to the long"
            f" pool, busy {detail['long_busy_share']:.0%}"
        )
    share = detail.get("transfer_share_of_median_ttft")
    pulls = "" if share is None else f", the KV pull {share:.0%} of the median TTFT"
    return (
        f"p99 TTFT {_ms(at.latency_ms['p99_ttft'])} ms = prefill queue + prefill + pull + first decode step,"
        f" p99 TPOT {_ms(at.latency_ms['p99_tpot'])} ms from the decode pool{pulls};"
        f" prefill busy {detail['prefill_busy_share']:.0%}, decode busy {detail['decode_busy_share']:.0%}"
    )


def topology_section(c: TopologyComparison, ranking: Ranking, unit: str):
    """(verdict, headers, rows, the winning unit's serve lines, units that cannot run) for report.md and .html."""
    from planner.sizing.fleet_serve import fleet_serve_lines

    serve = [] if c.best is None else fleet_serve_lines(c.best.unit.scenario)
    if serve:
        serve = [f"# {c.best.evaluation.units} unit(s) of {c.best.unit.label}", *serve]
    return verdict(c, ranking), HEADERS, [unit_row(r, unit) for r in c.results], serve, c.pruned


def interval_line(c: TopologyComparison, unit: str) -> str | None:
    """The best unit's 90% intervals in one line (--intervals N); None without them."""
    iv = c.intervals
    if iv is None:
        return None
    lat, digits = iv["latency_ms"], 0 if unit == "users" else 2
    need = iv["units_needed"]
    units = "-" if not need else "none enough" if need["low"] is None else f"{need['low']}-{need['high']}"
    if need and need["low"] is not None and need["low"] == need["high"]:
        units = str(need["low"])
    if iv["probability_units_suffice"] is not None:
        units += f" ({c.best.evaluation.units} enough in {iv['probability_units_suffice']:.0%})"
    capacity = "-" if iv["capacity_per_unit"] is None else f"{interval_text(iv['capacity_per_unit'], digits)} {unit}"
    if iv["capacity_searches_open"]:
        capacity += f" ({iv['capacity_searches_open']} of {iv['runs']} draws: at least)"
    return (
        f"90% intervals of {iv['label']} (median [5%-95%] over {iv['runs']} draws; {iv['varies']}): capacity/unit"
        f" {capacity}; units {units}; p99 TTFT {interval_text(lat['p99_ttft'])} ms; p99 TPOT {interval_text(lat['p99_tpot'])}"
        f" ms; every SLO met, steady, in {iv['probability_all_met']:.0%} of draws"
    )


def topology_lines(c: TopologyComparison, ranking: Ranking, unit: str) -> list[str]:
    text, headers, rows, serve, cannot = topology_section(c, ranking, unit)
    widths = [
        max(len(headers[i]), *(len(rw[i]) for rw in rows)) if rows else len(headers[i]) for i in range(len(headers))
    ]
    header = {
        "Aggregated against disaggregated": "(prefill/decode units, each behind its own proxy)",
        "Aggregated against length-routed": "(units of two pools, each behind its own router by prompt length)",
    }.get(title(c), "(prefill/decode units behind a proxy; length-routed units behind a router by prompt length)")
    lines = [f"{title(c)} {header}:"]
    lines.append("  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(rw, widths)).rstrip() for rw in rows]
    lines += [f"  {label}: cannot run: {why}" for label, why in cannot]
    lines.append(f"Topology: {text}")
    sized = f"{len(c.results)} unit{'s' if len(c.results) != 1 else ''}"
    lines.append(f"  ({sized} sized in {c.num_simulations} simulations, {c.wall_s:.1f} s wall)")
    if (line := interval_line(c, unit)) is not None:
        lines.append(f"  {line} ({c.interval_simulations} simulations, {c.interval_wall_s:.1f} s wall)")
    if serve:
        lines += [f"Serve the {c.best.unit.kind} units ({c.best.evaluation.units} of them) with:"]
        lines += ["  " + line for line in serve[1:]]
    return lines


def topology_data(c: TopologyComparison, ranking: Ranking) -> dict:
    """sizing.json's `disaggregated`."""
    from planner.sizing.fleet_serve import fleet_serve_lines

    def unit_data(r: UnitResult) -> dict:
        u, ev = r.unit, r.evaluation
        return {
            "label": u.label,
            "kind": u.kind,
            "gpus": {role: gpu.name for role, gpu in u.gpus.items()},
            "tensor_parallel_sizes": u.tensor_parallel_sizes,
            "replicas_per_unit": u.replicas,
            "num_gpus_per_unit": u.num_gpus(),
            "provenance": u.provenance,
            "capacity_per_unit": ev.capacity.load,
            "capacity_is_lower_bound": ev.capacity.lower_bound,
            "units": ev.units,
            "meets_slos": r.meets,
            "probes": [p.to_dict() for p in ev.capacity.probes],
            "at_demand": ev.at_demand.to_dict() if ev.at_demand else None,
            "at_demand_fleet": ev.detail,
            "rental_usd_per_month": r.rental_usd_per_month,
            "purchase_usd_per_month": r.purchase_usd_per_month,
            "objective_usd_per_month": r.objective_usd_per_month,
            "vllm_serve": fleet_serve_lines(u.scenario),
        }

    return {
        "verdict": verdict(c, ranking),
        "best": c.best.unit.label if c.best else None,
        "units": [unit_data(r) for r in c.results],
        "cannot_run": [{"label": label, "reason": why} for label, why in c.pruned],
        "num_simulations": c.num_simulations,
        "wall_s": c.wall_s,
        "intervals": c.intervals,  # --intervals N: the best unit's (planner/sizing/unit_intervals.py); else None
    }
