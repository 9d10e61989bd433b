"""The report's content, once, for the terminal, report.md and report.html."""

from __future__ import annotations

from planner.calibration.intervals import chance_inside
from planner.sizing.dp_serve import other_nodes_note
from planner.sizing.probe import LONGER_PROBE, LONGEST_PROBE
from planner.sizing.rank import Ranking, worst_ratio
from planner.sizing.report.interval_tables import interval_results, interval_row, varies_short
from planner.sizing.report.layouts import data_parallel_lines
from planner.sizing.search import Result, SizingResult, median_simulation_s
from planner.sizing.serve import vllm_serve_command

HEADERS = (
    "candidate", "replicas", "GPUs", "capacity / replica", "p50 / p99 TTFT ms", "p50 / p99 TPOT ms",
    "$/month", "$ / 1M out tok", "buy: $/month", "buy: $ / 1M out tok", "TPOT floor ms", "rests on", "verdict",
)  # fmt: skip
# The terminal's table: the money columns of the objective (renting, buying, or both), of HEADERS' indices.
TERMINAL_COLUMNS = {
    "rental": (0, 1, 3, 5, 6, 7, 11),
    "purchase": (0, 1, 3, 5, 8, 9, 11),
    "both": (0, 1, 3, 5, 6, 7, 8, 11),
}


OBJECTIVE_WORDS = {
    "rental": "the cheapest to rent per month",
    "purchase": "the cheapest to buy per month (price over the amortisation period, plus power)",
    "both": "the cheapest to rent per month, with the cost of buying beside it",
}


def cheapest_to_buy_line(ranking: Ranking) -> str | None:
    b = ranking.cheapest_to_buy
    if b is None or b is ranking.recommended:
        return None
    return (
        f"Cheapest to buy: {b.evaluation.replicas} replica(s) of {b.candidate.label}"
        f" (${b.costs.purchase_usd_per_month:,.0f}/month amortised, with power)."
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _usd(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"${v:,.{digits}f}"


def question_lines(out: SizingResult) -> list[str]:
    q = out.question
    s, d = q.scenario, q.search.demand
    w = s.workload
    slo = "; ".join(
        f"{m.removesuffix('_ms').upper()} {stat} <= {b:g} ms"
        for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
        for stat, b in getattr(s.slo, m).items()
    )
    cut = too_long(out)
    return [
        f"model: {s.model.name} ({s.model.num_params / 1e9:.2f}B parameters, {s.dtype})",
        f"workload: prompts {_dist(w.prompt_tokens)}, replies {_dist(w.output_tokens)} tokens",
        *([f"too long: {cut[0]}"] if cut else []),
        (
            f"demand: {_amount(d.value)} {d.unit} (from {d.source}), sized with headroom x{d.headroom:g}"
            f" = {_amount(d.value * d.headroom)} {d.unit}"
        ),
        f"SLOs: {slo or 'none (capacity = the highest steady-state load)'}",
        "objective: " + OBJECTIVE_WORDS[q.search.money.objective] + f" ({q.search.money.hours_per_month:g} h a month)",
    ]


def too_long(out: SizingResult) -> tuple[str, str] | None:
    """(the whole statement, the answer's few words) when the scenario's own max_model_len rejects or truncates
    some of the workload's requests: every candidate serves the rest (a swept max_model_len that drops more is
    pruned), and a deployment must refuse or cut them too. None when it keeps every request whole."""
    q = out.question
    total, length = q.search.probe.num_requests, q.scenario.max_model_len
    kept, truncated = q.probe_requests
    longer = f"longer than engine.max_model_len {length} (prompt + output tokens)"
    if kept < total:
        share = f"{(total - kept) / total:.0%}"
        statement = f"{share} of the requests ({total - kept:,} of a probe's {total:,}) are {longer} and rejected"
        statement += " (workload.too_long: reject); every figure below is of the rest"
        return statement, f"less the {share} longer than max_model_len {length}"
    if truncated:
        share = f"{truncated / total:.0%}"
        statement = f"{share} of the requests ({truncated:,} of a probe's {total:,}) are {longer} and truncated to it"
        statement += " (workload.too_long: truncate); every figure below is of the requests so cut"
        return statement, f"the {share} longer than max_model_len {length} truncated"
    return None


def _dist(d) -> str:
    if d.dist == "fixed":
        return str(d.value)
    if d.dist == "uniform":
        return f"uniform {d.low}-{d.high}"
    if d.dist in ("normal", "lognormal"):
        return f"{d.dist} mean {d.mean:g} std {d.std:g}"
    return "from the trace"


def answer(out: SizingResult, ranking: Ranking) -> str:
    d = out.question.search.demand
    r = ranking.recommended
    if r is None:
        if not ranking.closest:
            return "No candidate could be simulated."
        c = ranking.closest[0]
        ratio = worst_ratio(c)
        how_close = f" (its worst SLO value {ratio:.2f}x the bound)" if 0 < ratio < float("inf") else ""
        return (
            f"No candidate meets the SLOs at {_amount(d.value)} {d.unit}; the closest is {c.candidate.label}{how_close},"
            f" which {c.note.removeprefix('not cheaper: ')}. Per GPU below: how close each came and what it"
            " would take."
        )
    ev, c = r.evaluation, r.costs
    p = ev.at_demand.latency_ms
    buy = out.question.search.money.objective == "purchase"
    verb = "Buy" if buy else "Rent"
    per_million = c.purchase_usd_per_million_output_tokens if buy else c.rental_usd_per_million_output_tokens
    odds = ""
    if r.intervals:
        odds = (
            f"; every SLO held in {r.intervals['probability_all_met']:.0%} of {r.intervals['runs']} draws of"
            f" {varies_short(r.intervals)}"
        )
    return (
        f"{verb} {ev.replicas} replica{'s' if ev.replicas > 1 else ''} of {r.candidate.label}"
        f" ({c.num_gpus} {r.candidate.gpu.name} GPU{'s' if c.num_gpus > 1 else ''} in all):"
        f" {_usd(r.objective_usd_per_month)}/month, {_usd(per_million, 2)} per 1M output"
        f" tokens, serving {_amount(d.value)} {d.unit}{f' ({cut[1]})' if (cut := too_long(out)) else ''}"
        f" with p99 TTFT {_ms(p['p99_ttft'])} ms and p99 TPOT"
        f" {_ms(p['p99_tpot'])} ms ({r.candidate.provenance} figures{odds})."
        + (f" {OUT_OF_PROBES}" if ev.capacity.lower_bound else "")
    )


def row(r: Result, unit: str) -> list[str]:
    ev = r.evaluation
    p = ev.at_demand.latency_ms if ev and ev.at_demand else None
    c = r.costs
    verdict = "meets the SLOs" if r.meets else (r.note or "-")
    return [
        r.candidate.label,
        "-" if not ev or ev.replicas is None else str(ev.replicas),
        "-" if c is None else str(c.num_gpus),
        "-" if not ev else capacity_text(ev.capacity, unit),
        "-" if p is None else f"{_ms(p['p50_ttft'])} / {_ms(p['p99_ttft'])}",
        "-" if p is None else f"{_ms(p['p50_tpot'])} / {_ms(p['p99_tpot'])}",
        "-" if c is None else _usd(c.rental_usd_per_month),
        "-" if c is None else _usd(c.rental_usd_per_million_output_tokens, 2),
        "-" if c is None else _usd(c.purchase_usd_per_month),
        "-" if c is None else _usd(c.purchase_usd_per_million_output_tokens, 2),
        f"{r.tpot_floor_ms:.1f}",
        r.candidate.provenance,
        verdict,
    ]


def table_results(out: SizingResult, ranking: Ranking) -> list[Result]:
    """Meeting candidates cheapest first, then the other simulated ones."""
    rest = [r for r in out.evaluated if not r.meets]
    return ranking.feasible + sorted(rest, key=worst_ratio)


def not_simulated(out: SizingResult) -> list[Result]:
    return [r for r in out.results if r.evaluation is None]


def gpu_verdicts(out: SizingResult, ranking: Ranking) -> list[str]:
    """Per GPU: its best configuration, or the setup that came closest and what meeting the SLOs would take."""
    lines = []
    best = {}
    for r in ranking.feasible:
        best.setdefault(r.candidate.gpu.name, r)
    gpus = dict.fromkeys(r.candidate.gpu.name for r in out.results)
    tpot = out.question.scenario.slo.tpot_ms
    for gpu in gpus:
        own = [r for r in out.results if r.candidate.gpu.name == gpu]
        if gpu in best:
            r = best[gpu]
            text = f"{gpu}: {r.candidate.label} x {r.evaluation.replicas}, {_usd(r.objective_usd_per_month)}/month"
        else:
            text = f"{gpu}: no setup tried meets the SLOs; " + _closest_on_gpu(own)
        if tpot:
            text += _physics_floor(own, min(tpot.values()))
        lines.append(text)
    return lines


def _closest_on_gpu(own: list[Result]) -> str:
    """The simulated setup of one GPU that came closest, and what meeting the SLOs would take."""
    simulated = [r for r in own if r.evaluation is not None]
    if not simulated:
        return own[0].note
    r = min(simulated, key=worst_ratio)
    text = f"closest: {r.candidate.label}, which {r.note.removeprefix('not cheaper: ')}"
    ratio = worst_ratio(r)
    if r.evaluation.capacity.load <= 0 and 1 < ratio < float("inf"):
        text += f"; meeting them would take bounds {ratio:.2f}x looser, or a faster GPU"
    return text


def _physics_floor(own: list[Result], tpot_bound_ms: float) -> str:
    """Tensor parallel sizes at which reading the weights once already takes longer than the TPOT bound."""
    floors = {}
    for r in own:
        tp = r.candidate.tensor_parallel_size
        floors[tp] = min(floors.get(tp, float("inf")), r.tpot_floor_ms)
    slow = sorted(tp for tp, f in floors.items() if f > tpot_bound_ms)
    if not slow:
        return ""
    sizes = " and ".join(", ".join(map(str, slow)).rsplit(", ", 1))
    times = " and ".join(", ".join(f"{floors[tp]:.1f}" for tp in slow).rsplit(", ", 1))
    text = (
        f". At tensor parallel {sizes} no engine can meet TPOT {tpot_bound_ms:g} ms: reading the weights once"
        f" takes {times} ms per token (the physics floor, at the spec bandwidth)"
    )
    if len(slow) == len(floors):
        text += "; no size tried gets under it"
    return text


def serve_lines(ranking: Ranking) -> list[str]:
    out = []
    picks = ([ranking.recommended] if ranking.recommended else []) + [r for r, _ in ranking.runner_ups]
    for r in picks:
        out.append(f"# {r.candidate.label}: {r.evaluation.replicas} replica(s) behind a load balancer")
        out.append(vllm_serve_command(r.candidate.scenario))
        others = other_nodes_note(r.candidate.scenario)
        if others is not None:
            out.append(others)
    return out


def assumptions(out: SizingResult) -> list[str]:
    q = out.question
    m = q.search.money
    gpus = {r.candidate.gpu.name: r.candidate.gpu for r in out.results}
    from planner.sizing.money import prices

    lines = []
    for name, gpu in gpus.items():
        p = prices(gpu, m)
        lines.append(
            f"{name}: rent {_usd(p.rental_usd_per_gpu_hour, 2)}/GPU-h ({p.rental_source}); buy"
            f" {_usd(p.purchase_usd_per_gpu)} ({p.purchase_source}); TDP {gpu.tdp_w or '-'} W"
        )
    provenances = sorted({r.candidate.provenance for r in out.results})
    lines += [
        (
            f"power: TDP x {m.power_utilization:g} utilisation x ${m.power_usd_per_kwh:g}/kWh; purchase amortised over"
            f" {m.amortization_months:g} months; hosts, networking, cooling and staff are not included"
        ),
        *_host_memory_price(out),
        f"cost-model coefficients: {'; '.join(provenances)}",
        *_provenance_caveats(provenances),
        (
            f"each capacity is the highest load whose {q.search.probe.num_requests:,}-request simulation meets every SLO"
            f" in a steady state (bisection to {q.search.probe.tolerance:.0%}; a rate too short to tell a growing queue"
            f" from one filling up runs again, {LONGER_PROBE}x longer, up to {LONGEST_PROBE}x); latencies at the demand"
            " come from one more simulation of one replica at its share of the demand"
        ),
        f"search: {len(out.results) + len(out.pruned):,} candidates, {len(out.pruned):,} cannot run,"
        f" {len(not_simulated(out)):,} not simulated (cannot win or cannot meet the TPOT bound at any load),"
        f" {len(out.evaluated):,} simulated in {out.num_simulations:,} simulations"
        + (f" (median {median_simulation_s(out):.2f} s)" if out.simulation_wall_s else "")
        + f"; {out.wall_s:.1f} s wall on {out.workers} {'Ray' if out.backend == 'ray' else 'process'} worker(s)",
    ]
    return lines


def _host_memory_price(out: SizingResult) -> list[str]:
    """How the host memory of the candidates' KV tiers is priced; nothing when no candidate has one."""
    if not any(r.candidate.host_memory_gib for r in out.results):
        return []
    m = out.question.search.money
    text = (
        f"host memory of the KV tiers (engine.kv_offload): rent ${m.host_memory_usd_per_gib_hour:g}/GiB-h, buy"
        f" ${m.host_memory_usd_per_gib:g}/GiB (search.money.host_memory_usd_per_gib_hour, host_memory_usd_per_gib)"
    )
    if not (m.host_memory_usd_per_gib_hour or m.host_memory_usd_per_gib):
        text += "; free here, as a cloud GPU instance's RAM comes with its GPUs: set them if yours does not"
    return [text]


def terminal_lines(out: SizingResult, ranking: Ranking) -> list[str]:
    unit = out.question.search.demand.unit
    lines = [f"{out.question.scenario.name}: sizing", *("  " + x for x in question_lines(out)), ""]
    lines += ["Answer: " + answer(out, ranking), ""]
    lines += ["Per GPU:", *("  " + x for x in gpu_verdicts(out, ranking)), ""]
    rows = [row(r, unit) for r in table_results(out, ranking)[:15]]
    keep = TERMINAL_COLUMNS[out.question.search.money.objective]
    widths = [max(len(HEADERS[i]), *(len(rw[i]) for rw in rows)) if rows else len(HEADERS[i]) for i in keep]
    lines.append("  ".join(HEADERS[i].ljust(w) for i, w in zip(keep, widths)))
    lines += ["  ".join(rw[i].ljust(w) for i, w in zip(keep, widths)) for rw in rows]
    if ranking.runner_ups:
        lines += ["", "Runner-ups:"] + [f"  {r.candidate.label}: {why}" for r, why in ranking.runner_ups]
    if layouts := data_parallel_lines(out):
        lines += ["", "Where the data-parallel layouts' step time goes:", *("  " + x for x in layouts)]
    if interval_results(out):
        inside = chance_inside(out.interval_runs)
        header = f"90% intervals (median [5%-95%] over {out.interval_runs} draws, a further draw inside about"
        lines += ["", f"{header} {inside:.0%} of the time; report.md says how):"]
        for r in interval_results(out):
            rw = interval_row(r, unit)
            lines.append(
                f"  {rw[0]} ({rw[1]}; {rw[11]}): capacity {rw[3]}; replicas {rw[4]}; p99 TTFT {rw[6]} ms; p99 TPOT {rw[8]}"
                f" ms; {rw[10]}"
            )
    if ranking.recommended:
        lines += ["", "Serve it with:", *("  " + x for x in serve_lines(ranking)[:2])]
    lines += ["", assumptions(out)[-1]]
    return lines


def _provenance_caveats(provenances: list[str]) -> list[str]:
    """What each kind of coefficients the figures rest on does and does not cover."""
    caveats = []
    if any(p.startswith("calibrated (public profile") for p in provenances):
        caveats.append(
            "public calibrations fit the linear layers, norms, launches and all-reduces to Vidur's measured operator"
            " times (docs/fidelity.md); attention and the host side stay estimates"
        )
    if any(p.startswith("transferred") for p in provenances):
        caveats.append(
            "transferred coefficients come from profiled GPUs by spec-sheet ratios; their leave-one-GPU-out error is"
            " in docs/fidelity.md"
        )
    if "spec-sheet" in provenances:
        caveats.append("spec-sheet figures are not calibrated against a measured engine: treat capacities as estimates")
    return caveats


OUT_OF_PROBES = (
    "Its capacity per replica is a lower bound: the search ran out of probes before a failing load close above it"
    " (raise search.probe.max_probes), so fewer replicas may do."
)


def capacity_text(capacity, unit: str) -> str:
    """A replica's capacity as the table shows it: `>= x` where the search ran out of probes above it."""
    text = f"{capacity.load:,.{0 if unit == 'users' else 2}f} {unit}"
    return f">= {text}" if capacity.lower_bound else text


def _amount(value: float) -> str:
    """A demand as people write it: 4.7 req/s, 24 users, 80,000 users (not 8e+04)."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"
