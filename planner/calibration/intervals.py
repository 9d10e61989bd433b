"""`planner simulate --intervals N`: how much a prediction could move, from the things a planner does not
know exactly: which requests come (N workload seeds), the cost model's coefficients (a draw from the
fit's uncertainty per run) and the step time the fit left unexplained (its residual spread, where the
profile's fit says it). Reports the 90% interval of every reported statistic and, per SLO, the share of
runs that met it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from planner.calibration.fitting import BOUNDS
from planner.calibration.provenance import STEP_TIME_SPREAD, Provenance
from planner.scenario.rules import MIN_INTERVAL_RUNS
from sim.config import Scenario
from sim.cost_coefficients import CostCoefficients
from sim.engine_facts import EngineFacts
from sim.metrics import LATENCY_KEYS, summarize

STATS = ("mean", "median", "p90", "p99")
METRICS = ("request_throughput", "output_throughput") + tuple(
    f"{stat}_{key}_ms" for key in LATENCY_KEYS for stat in STATS
)
LOW_Q, HIGH_Q = 5, 95  # a 90% interval


def chance_inside(runs: int) -> float:
    """The chance that one more run lands inside the 5%-95% range of `runs` runs: numpy's linear percentiles sit
    at order-statistic positions 1 + 0.05 (n - 1) and 1 + 0.95 (n - 1), which hold 0.9 (n - 1) / (n + 1) of the
    mass on average (exactly for uniform draws, within ~2% for others). The 90% is reached only with many runs
    (74% with 10, 81% with 20, 88% with 100): what a model exactly right scores in the held-out coverage."""
    return 0.9 * (runs - 1) / (runs + 1)


def draw_coefficients(
    coefficients: CostCoefficients, uncertainty: dict[str, float], rng: np.random.Generator
) -> CostCoefficients:
    """One draw: each coefficient with a known std from a normal around its value, kept within its bounds;
    then, with a STEP_TIME_SPREAD, every step's time scaled by one factor exp(N(0, spread)) (efficiencies
    divided by it, seconds multiplied: every term of the cost model scales so). The fit's residuals are
    partly step-to-step noise that averages out over a run; drawing them as one factor per run treats them
    all as a systematic error of the form, so the interval errs wide rather than narrow."""
    changes = {}
    for name, std in sorted(uncertainty.items()):
        if name != STEP_TIME_SPREAD and std > 0 and np.isfinite(std):
            lo, hi, _ = BOUNDS[name]
            changes[name] = float(np.clip(rng.normal(getattr(coefficients, name), std), lo, hi))
    drawn = dataclasses.replace(coefficients, **changes)
    spread = uncertainty.get(STEP_TIME_SPREAD, 0.0)
    if not (spread > 0 and np.isfinite(spread)):
        return drawn
    factor = float(np.exp(rng.normal(0.0, spread)))
    scaled = {}
    for f in dataclasses.fields(drawn):
        value = getattr(drawn, f.name)
        if value is None:  # a drafting term not calibrated: priced by its estimate, unscaled
            continue
        if f.name.endswith("_efficiency"):
            scaled[f.name] = min(value / factor, 1.0)
        elif f.name.endswith("_s") or "_s_per_" in f.name:  # seconds, or seconds per token
            scaled[f.name] = value * factor
    return dataclasses.replace(drawn, **scaled)


def simulate_intervals(
    scenario: Scenario,
    facts: EngineFacts,
    coefficients: CostCoefficients,
    provenance: Provenance,
    num_runs: int,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """N runs (seeds seed..seed+N-1, one coefficient draw each) of the scenario's engine (its `facts`: the seed
    changes none); the 90% interval per statistic and the probability each SLO is met."""
    from sim.driver import simulate  # simpy: only when simulating

    def run(run_scenario: Scenario, rng: np.random.Generator):
        drawn = draw_coefficients(coefficients, provenance.uncertainty, rng)
        return simulate(run_scenario, drawn, record_steps=False, facts=facts).recorder

    return _intervals(scenario, run, num_runs, _drawn_names(provenance.uncertainty), progress)


def simulate_fleet_intervals(
    scenario: Scenario,
    coefficients: dict[str, CostCoefficients],
    provenance: dict[str, Provenance],
    num_runs: int,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """A fleet's N runs, as `simulate_intervals`: the client's figures. Pools whose coefficients rest on the same
    provenance (the same GPU's profile) share one draw per run, their errors being the same error; the others
    draw on their own."""
    from sim.fleet import simulate_fleet

    labels = {pool: provenance[pool].label for pool in coefficients}

    def run(run_scenario: Scenario, rng: np.random.Generator):
        draws: dict[str, CostCoefficients] = {}
        drawn = {}
        for pool, label in labels.items():
            if label not in draws:
                draws[label] = draw_coefficients(coefficients[pool], provenance[pool].uncertainty, rng)
            drawn[pool] = draws[label]
        return simulate_fleet(run_scenario, drawn, record_steps=False).recorder

    names = sorted({name for prov in provenance.values() for name in _drawn_names(prov.uncertainty)})
    return _intervals(scenario, run, num_runs, names, progress)


def _drawn_names(uncertainty: dict[str, float]) -> list[str]:
    return sorted(n for n, s in uncertainty.items() if s > 0 and np.isfinite(s))


def _intervals(scenario: Scenario, run, num_runs: int, drawn_names: list[str], progress) -> dict:
    """`run(scenario with the run's seed, rng)` -> the recorder of one run (its coefficients drawn from rng)."""
    rng = np.random.default_rng(scenario.workload.seed)
    values = {m: [] for m in METRICS}
    slo_met: list[list[bool | None]] = []
    checks = []
    for i in range(num_runs):
        workload = dataclasses.replace(scenario.workload, seed=scenario.workload.seed + i)
        summary = summarize(run(dataclasses.replace(scenario, workload=workload), rng), scenario.slo)
        checks = summary["slo"]["checks"]
        if summary["completed"]:  # a run that rejected every request has no figures to add
            for m in METRICS:
                values[m].append(summary[m])
            slo_met.append([c["met"] for c in checks])
        if progress is not None:
            progress(i + 1, num_runs)
    with_requests = len(slo_met)
    enough = with_requests >= MIN_INTERVAL_RUNS  # else no spread: nothing is given (interval_lines says why)
    metrics = {}
    for m, vs in values.items():
        finite = np.asarray([v for v in vs if v is not None and np.isfinite(v)], dtype=np.float64)
        if len(finite) and enough:
            low, mid, high = np.percentile(finite, [LOW_Q, 50, HIGH_Q])
            metrics[m] = {"low": float(low), "median": float(mid), "high": float(high)}
        else:
            metrics[m] = {"low": None, "median": None, "high": None}
    slo = []
    for j, check in enumerate(checks):
        known = [run[j] for run in slo_met if run[j] is not None] if enough else []
        slo.append(
            {
                "metric": check["metric"],
                "stat": check["stat"],
                "bound_ms": check["bound_ms"],
                "probability_met": float(np.mean(known)) if known else None,
            }
        )
    return {
        "runs": num_runs,
        "runs_with_requests": with_requests,  # the others rejected every request: the figures rest on these
        "seeds": [scenario.workload.seed, scenario.workload.seed + num_runs - 1],
        "workload_varies": _seed_changes_workload(scenario),
        "coefficients_drawn": drawn_names,
        "interval": "90%",
        "metrics": metrics,
        "slo": slo,
    }


def _seed_changes_workload(scenario: Scenario) -> bool:
    """Whether another seed draws other requests: a replayed trace, constant or closed-loop arrivals with fixed
    lengths are the same whatever the seed (the runs then differ by their coefficient draws alone)."""
    from sim.workload import generate_workload

    a, b = (
        generate_workload(
            dataclasses.replace(scenario.workload, seed=seed), scenario.max_model_len, scenario.model.vocab_size
        )
        for seed in (scenario.workload.seed, scenario.workload.seed + 1)
    )
    arrays = ("prompt_tokens", "output_tokens", "prefix_group", "prefix_tokens")
    same_times = (a.arrival_s is None and b.arrival_s is None) or (
        a.arrival_s is not None and b.arrival_s is not None and np.array_equal(a.arrival_s, b.arrival_s)
    )
    return not (same_times and all(np.array_equal(getattr(a, n), getattr(b, n)) for n in arrays))


def interval_lines(intervals: dict, provenance_label: str) -> list[str]:
    drawn = intervals["coefficients_drawn"]
    source = (
        f"coefficient draws from {provenance_label}'s uncertainty ({', '.join(drawn)})"
        if drawn
        else f"fixed coefficients ({provenance_label} gives no uncertainty)"
    )
    first, last = intervals["seeds"]
    runs, with_requests = intervals["runs"], intervals["runs_with_requests"]
    if with_requests < MIN_INTERVAL_RUNS:
        none = f"no 90% intervals: {with_requests} of {runs} runs (workload seeds {first}..{last}) completed requests"
        return ["", f"{none}, the others rejected every request; an interval needs {MIN_INTERVAL_RUNS}"]
    over = (
        f"{runs} runs"
        if with_requests == runs
        else f"{with_requests} of {runs} runs ({runs - with_requests} rejected every request)"
    )
    lines = [
        "",
        f"90% intervals over {over} (their 5%-95% range: a further run lands inside about"
        f" {chance_inside(with_requests):.0%} of the time): workload seeds {first}..{last} x {source}"
        + ("" if intervals.get("workload_varies", True) else " (every seed gives this workload the same requests)"),
        f"  {'':<22}{'5%':>12}{'median':>12}{'95%':>12}",
    ]
    for m, v in intervals["metrics"].items():
        if v["low"] is None:
            continue
        lines.append(f"  {m:<22}{v['low']:>12,.2f}{v['median']:>12,.2f}{v['high']:>12,.2f}")
    for s in intervals["slo"]:
        p = "n/a" if s["probability_met"] is None else f"{s['probability_met'] * 100:.0f}%"
        lines.append(f"  SLO {s['metric']} {s['stat']} <= {s['bound_ms']:g}: met in {p} of runs")
    return lines
