"""Speculative decoding's drafting terms fitted to the live engine's timed drafting (`fit_drafting`), and the
profile that carries them (`with_drafting`).

The live engine times each step's drafting apart from its verifying forward (gpu_engine/speculative.py, one row
per step that drafted: sim.draft_cost.DRAFT_COLUMNS). The simulator prices it with the drafter's own facts under
the target's coefficients, pass by pass (sim/draft_cost.py). What that leaves out is fitted here, per
method, with the target's coefficients held at their fit:

- a drafter (eagle, eagle3, mtp, draft_model): `draft_pass_overhead_s`, a fixed cost per pass: the host's work
  between passes (inputs, sampling the draft) and the launches, which a one-layer roofline does not hold. vLLM
  runs the passes one after the other with a sampling in between (vllm/v1/spec_decode/eagle.py `propose`);
  the published EAGLE-3 TPOT growing with k faster than its head's flops (planner/fidelity/speculative.py) is
  what such a term would express on a GPU.
- ngram: `ngram_s_per_context_token`, the lookup's host seconds per context token scanned (vLLM's
  NgramProposer scans each drafting request's whole context, vllm/v1/spec_decode/ngram_proposer.py), and
  `ngram_overhead_s` per lookup (one a step: its call, its batch's bookkeeping). Terms of their own: a profile
  of one method adds nothing to the other's drafting.

What a CPU fit transfers to a GPU: nothing. Our CPU engine's pass overhead is Python and torch dispatch on a
host core, our n-gram lookup is Python (vLLM's is numba); a GPU's figures need `planner calibrate --gpu` on that
GPU. Same fitter as the target's terms (planner/calibration/fit.py: bounded least squares on relative error).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from planner.calibration.fit import FitResult, fit_relative
from planner.errors import PlannerError
from sim.config import Scenario
from sim.cost_coefficients import CostCoefficients
from sim.draft_cost import DRAFT_COLUMNS, DRAFT_STEP, DRAFTER_TERMS, NGRAM_TERMS, DraftCost, fitted_terms
from sim.engine_facts import EngineFacts

DRAFT_TERMS = DRAFTER_TERMS + NGRAM_TERMS
# Fewer drafting steps leave the terms' stds to a handful of residuals
MIN_DRAFT_ROWS = 20
DRAFTING = "drafting"  # its class in a profile's fit.by_class and in the validation's step groups


def drafting_terms(scenario: Scenario) -> tuple[str, ...]:
    """The terms fitted for the scenario's method."""
    return fitted_terms(scenario.engine.speculative.method)


def drafter_of(scenario: Scenario) -> tuple | None:
    """What a profile's drafting terms are of: the method, k and the drafter (None: the engine does not draft)."""
    spec = scenario.engine.speculative
    return None if spec is None else (spec.method, spec.num_speculative_tokens, spec.model)


def drafter_name(scenario: Scenario) -> str:
    spec = scenario.engine.speculative
    if spec is None:
        return "no drafter (no engine.speculative)"
    return f"{spec.method}{'' if spec.model is None else ' ' + spec.model.name}, k = {spec.num_speculative_tokens}"


def without_drafting(steps: dict[str, np.ndarray], drafts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A live speculative run's steps.csv rows with each drafting step's draft_s (its drafting.csv, keyed by the
    step's row) taken out of its device_s and duration_s: the verifying forward alone, which the target's terms
    price (the simulator adds drafting to a step's device side as the live engine times it inside its own)."""
    rows = dict(steps)
    for name in ("device_s", "duration_s"):
        if name in rows:
            column = np.array(rows[name], dtype=np.float64)
            column[drafts[DRAFT_STEP]] -= drafts["draft_s"]
            rows[name] = column
    return rows


def predict_drafting(facts: EngineFacts, coefficients: CostCoefficients, rows: dict[str, np.ndarray]) -> np.ndarray:
    """Each row's drafting seconds as the simulator prices them (sim/draft_cost.py) over the live row's shape."""
    cost = DraftCost(facts, coefficients)
    r = {name: np.asarray(rows[name], dtype=np.float64) for name in DRAFT_COLUMNS}
    if cost.drafter is None:
        return np.asarray(cost.ngram_s(r["context_tokens"]), dtype=np.float64)
    n = r["num_rows"]
    first = cost.first_pass_s(r["num_tokens"], n, n, r["attention_pairs"], r["context_tokens"])
    return np.asarray(first + (cost.k - 1) * cost.later_pass_s(n, r["later_context_tokens"]), dtype=np.float64)


def error_stats(errors: np.ndarray) -> dict:
    """{rows, median, p90} of |relative error|, as a fit's by_class holds them."""
    a = np.abs(errors)
    return {"rows": len(a), "median": float(np.median(a)), "p90": float(np.percentile(a, 90))}


@dataclass(frozen=True)
class DraftFit:
    coefficients: CostCoefficients  # the target's fit with the drafting terms
    result: FitResult  # the drafting terms; relative_errors per drafting step
    uncalibrated_errors: np.ndarray  # the same steps priced without the terms (the target's fit alone)

    @property
    def stats(self) -> dict:
        return error_stats(self.result.relative_errors)

    def lines(self) -> list[str]:
        """The fit as the terminal shows it."""
        s, before = self.stats, error_stats(self.uncalibrated_errors)
        lines = [f"Drafting fit over {s['rows']:,} drafting steps (the target's terms held at their fit)"]
        for name, value, std in zip(self.result.names, self.result.values, self.result.std):
            bound = "  AT BOUND: the form does not fit" if name in self.result.at_bound else ""
            lines.append(f"  {name:<28}{value:>12.4g}  +- {std:.2g}{bound}")
        errors = (
            f"  drafting steps: median |err| {s['median'] * 100:.1f}%, p90 {s['p90'] * 100:.1f}%"
            f" (without the terms: median {before['median'] * 100:.1f}%, p90 {before['p90'] * 100:.1f}%)"
        )
        return [*lines, errors]


def fit_drafting(
    scenario: Scenario, coefficients: CostCoefficients, rows: dict[str, np.ndarray], cuda_graphs: bool = False
) -> DraftFit:
    """The method's drafting terms fitted to timed drafting steps (rows: DRAFT_COLUMNS), the target's coefficients
    held (robust loss: a step stalled by a busy machine does not pull the fit)."""
    from planner.calibration.fitting import BOUNDS, ROBUST_SCALE, measured_scenario

    if scenario.engine.speculative is None:
        raise PlannerError(f"{scenario.source}: no engine.speculative: there is no drafting to fit")
    measured = np.asarray(rows["draft_s"], dtype=np.float64)
    if len(measured) < MIN_DRAFT_ROWS:
        raise PlannerError(
            f"{scenario.source}: {len(measured)} drafting steps measured; fitting the drafting terms needs at least"
            f" {MIN_DRAFT_ROWS} (run more requests)"
        )
    facts = EngineFacts.of(measured_scenario(scenario, cuda_graphs))
    names = drafting_terms(scenario)
    base = dataclasses.replace(coefficients, **dict.fromkeys(DRAFT_TERMS))  # the drafting terms not yet known

    def with_terms(x) -> CostCoefficients:
        return dataclasses.replace(base, **{n: float(v) for n, v in zip(names, x)})

    lo, hi, scale = zip(*(BOUNDS[n] for n in names))
    result = fit_relative(
        lambda x: predict_drafting(facts, with_terms(x), rows), measured, names, scale, lo, hi, scale,
        loss="soft_l1", f_scale=ROBUST_SCALE,
    )  # fmt: skip
    before = (predict_drafting(facts, base, rows) - measured) / measured
    return DraftFit(with_terms(result.values), result, before)


def with_drafting(profile, fit: DraftFit):
    """The profile (planner.calibration.profile.Profile) with the drafting terms, their stds and their errors
    (fit.by_class.drafting); its id recomputed from its content."""
    from planner.calibration.profile import content_id

    values = {n: float(v) for n, v in zip(fit.result.names, fit.result.values)}
    stds = {n: float(s) for n, s in zip(fit.result.names, fit.result.std) if np.isfinite(s)}
    fit_block = dict(profile.fit)
    fit_block["by_class"] = dict(fit_block.get("by_class", {})) | {DRAFTING: fit.stats}
    changed = dataclasses.replace(
        profile,
        id="",
        coefficients=dict(profile.coefficients) | values,
        uncertainty=dict(profile.uncertainty) | stds,
        fit=fit_block,
    )
    return dataclasses.replace(changed, id=content_id(changed.to_dict()))


# The live runs the drafting terms are fitted to: closed loops of 1 user, a quarter of max_num_seqs and
# max_num_seqs (drafting rows from one to the batch limit), the scenario's own lengths, seeds unlike the
# held-out runs' (planner/calibration/validate.py), which check the fitted terms on drafting steps it never saw.
DRAFTING_SEEDS = (201, 202, 203)


def measure_drafting(scenario: Scenario, device: str, num_requests: int, progress=lambda name: None) -> dict:
    """Live runs of the speculative scenario (DRAFTING_SEEDS' loads, num_requests each): their drafting steps,
    timed (sim.draft_cost.DRAFT_COLUMNS)."""
    from gpu_engine.engine import run_scenario
    from planner.calibration.validate import with_load
    from sim.config import ArrivalConfig

    seqs = scenario.engine.max_num_seqs
    parts = []
    for seed, users in zip(DRAFTING_SEEDS, sorted({1, max(1, seqs // 4), seqs})):
        name = f"drafting-{users}-users"
        progress(name)
        _, run_as = with_load(
            scenario, name, num_requests=num_requests, seed=seed, arrival=ArrivalConfig("closed", concurrency=users)
        )
        parts.append(run_scenario(run_as, device).drafts)
    return {name: np.concatenate([p[name] for p in parts]) for name in DRAFT_COLUMNS}


def held_out_drafting(runs, coefficients: CostCoefficients) -> tuple[list[str], tuple]:
    """The held-out runs' (validate.HeldOutRun) drafting steps priced with the fitted terms and without them: the
    report's line, and the step scatter's group (label, measured, predicted)."""
    measured, fitted, without = [], [], []
    for run in runs:
        facts = EngineFacts.of(run.scenario)
        measured.append(np.asarray(run.drafts["draft_s"], dtype=np.float64))
        fitted.append(predict_drafting(facts, coefficients, run.drafts))
        without.append(
            predict_drafting(facts, dataclasses.replace(coefficients, **dict.fromkeys(DRAFT_TERMS)), run.drafts)
        )
    m, f, w = (np.concatenate(a) for a in (measured, fitted, without))
    s, before = error_stats((f - m) / m), error_stats((w - m) / m)
    line = (
        f"held-out drafting: {s['rows']:,} drafting steps of {len(runs)} runs, median |err| {s['median'] * 100:.1f}%,"
        f" p90 {s['p90'] * 100:.1f}% (without the drafting terms: median {before['median'] * 100:.1f}%,"
        f" p90 {before['p90'] * 100:.1f}%); measured drafting {m.sum():.3g} s, predicted {f.sum():.3g} s"
    )
    return [line], ("held-out drafting", m, f)
