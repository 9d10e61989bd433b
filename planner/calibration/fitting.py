"""The cost model fitted to measured steps: `fit_steps` (on rows with steps.csv's columns, from the sweep or
from live runs), `predict_rows`, and `fit_from_runs` for `planner calibrate --from RUN_DIR ...`.

Our measurements come from a synchronous engine (the live engine and the sweep both wait for every step),
so they are fitted with the serial form. Where the rows carry both sides of a step (`host_s`, `device_s`),
the device terms are fitted to device_s and the host terms to host_s, separately: a per-step host
overhead and a per-step launch overhead are otherwise indistinguishable in a serial total, and the
simulator needs them apart (under async scheduling only the larger side counts). Rows without them fit
the serial total with the host terms kept at their defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.calibration.busy import busy_reasons
from planner.calibration.device_gpu import calibration_gpu, measured_gpu, on_measured_gpu
from planner.calibration.draft_fit import drafter_name, drafter_of, fit_drafting, with_drafting, without_drafting
from planner.calibration.fit import FitResult, fit_relative
from planner.calibration.profile import Profile, profile_from_fit
from planner.calibration.run_folder import read_drafting, read_run
from planner.calibration.wake import wake_from_steps, with_wake, woken_steps
from planner.errors import PlannerError
from sim.config import Scenario
from sim.cost_model import CostCoefficients, CostModel
from sim.draft_cost import DRAFT_COLUMNS
from sim.engine_facts import EngineFacts

# name -> (lower, upper, scale): physical bounds (an efficiency in (0, 1], an overhead >= 0 and below
# what any engine would tolerate) and the typical magnitude the solver steps by.
BOUNDS = {
    "flops_efficiency": (0.01, 1.0, 0.5),
    "bandwidth_efficiency": (0.01, 1.0, 0.5),
    "interconnect_efficiency": (0.01, 1.0, 0.5),
    "allreduce_latency_s": (0.0, 1e-3, 1e-5),
    "allreduce_launch_wait_s": (0.0, 1e-3, 1e-5),  # not fitted by calibrate (public profiles: public_fit)
    "launch_overhead_per_layer_s": (0.0, 1e-3, 1e-5),
    "kernel_floor_per_layer_s": (0.0, 1e-3, 1e-5),  # not fitted by calibrate (public profiles: public_fit)
    "attention_floor_per_layer_s": (0.0, 1e-3, 1e-5),  # not fitted by calibrate (LLMServingSim's profiles)
    "attention_flops_ratio": (0.05, 2.0, 0.5),  # likewise
    "mixed_step_attention_factor": (1.0, 10.0, 1.0),  # likewise
    "per_row_layer_overhead_s": (0.0, 1e-3, 1e-5),
    "step_overhead_s": (0.0, 0.1, 1e-3),
    "per_row_overhead_s": (0.0, 1e-2, 1e-5),
    # speculative decoding's drafting, fitted after the rest (planner/calibration/draft_fit.py)
    "draft_pass_overhead_s": (0.0, 0.1, 1e-4),
    "ngram_s_per_context_token": (0.0, 1e-4, 1e-8),
    "ngram_overhead_s": (0.0, 0.1, 1e-5),
    # the first step after idle, timed apart from the fit (planner/calibration/wake.py)
    "idle_wake_s": (0.0, 0.1, 1e-4),
}
HOST_TERMS = ("step_overhead_s", "per_row_overhead_s")
ZERO_IS_PHYSICAL = ("per_row_layer_overhead_s",)  # 0 where attention is one batched kernel: not a misfit
CLASSES = ("decode", "prefill", "mixed")
ROBUST_SCALE = 0.1  # soft-L1 beyond 10% relative error: a step stalled by a busy machine does not pull the fit


@dataclass(frozen=True)
class StepFit:
    coefficients: CostCoefficients
    uncertainty: dict[str, float]  # fitted coefficient -> one std (finite ones only)
    result: FitResult  # all fitted coefficients; relative_errors of the serial total per row
    by_class: dict[str, dict[str, float]]  # class -> {rows, median, p90} of |relative error|
    worst: list[dict]  # the worst-fitting rows: index, class, measured_s, predicted_s, error
    at_bound: tuple[str, ...]

    def lines(self) -> list[str]:
        """The fit as the terminal shows it."""
        out = [f"Fit over {len(self.result.relative_errors):,} steps (bounded least squares on relative error)"]
        for name, value, std in zip(self.result.names, self.result.values, self.result.std):
            bound = "  AT BOUND: the form does not fit" if name in self.at_bound else ""
            out.append(f"  {name:<28}{value:>12.4g}  +- {std:.2g}{bound}")
        out.append(f"  {'class':<10}{'steps':>8}{'median |err|':>14}{'p90 |err|':>11}")
        for name, stats in self.by_class.items():
            out.append(f"  {name:<10}{stats['rows']:>8,}{stats['median'] * 100:>13.1f}%{stats['p90'] * 100:>10.1f}%")
        out.append(
            "  worst steps: " + ", ".join(f"#{w['index']} {w['class']} {w['error'] * 100:+.0f}%" for w in self.worst)
        )
        return out


def step_classes(rows: dict[str, np.ndarray]) -> np.ndarray:
    """decode (no prompt tokens), prefill (no decode row) or mixed, per row."""
    prefill = np.asarray(rows["num_prefill_tokens"]) > 0
    decode = np.asarray(rows["num_decode_requests"]) > 0
    return np.where(~prefill, "decode", np.where(~decode, "prefill", "mixed"))


def _shape(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The cost model's inputs; num_tokens/num_seqs derived when the rows predate those columns (num_seqs
    then counts one prefill row per step: a lower bound)."""
    f = {k: np.asarray(rows[k], dtype=np.float64) for k in ("num_sampled", "attention_pairs", "sum_context_tokens")}
    prefill = np.asarray(rows["num_prefill_tokens"], dtype=np.float64)
    decode = np.asarray(rows["num_decode_requests"], dtype=np.float64)
    f["num_tokens"] = np.asarray(rows["num_tokens"], dtype=np.float64) if "num_tokens" in rows else prefill + decode
    f["num_seqs"] = np.asarray(rows["num_seqs"], dtype=np.float64) if "num_seqs" in rows else decode + (prefill > 0)
    return f


def _sides(model: CostModel, s: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    device = model.device_s(
        s["num_tokens"], s["num_seqs"], s["num_sampled"], s["attention_pairs"], s["sum_context_tokens"]
    )
    return np.asarray(model.host_s(s["num_seqs"]), dtype=np.float64), np.asarray(device, dtype=np.float64)


def predict_rows(
    facts: EngineFacts, coefficients: CostCoefficients, rows: dict[str, np.ndarray], serial: bool | None = None
) -> np.ndarray:
    """Predicted seconds per row on an engine (its facts): its form (async or serial) unless `serial` says which."""
    model = CostModel(facts, coefficients)
    host, device = _sides(model, _shape(rows))
    if serial is None:
        return np.asarray(model.combine(host, device), dtype=np.float64)
    return host + device if serial else np.maximum(host, device)


def measured_scenario(scenario: Scenario, cuda_graphs: bool = False) -> Scenario:
    """The scenario as our synchronous engine ran it: serial, and without CUDA graphs unless it used them."""
    return dataclasses.replace(scenario, engine=dataclasses.replace(scenario.engine, enforce_eager=not cuda_graphs))


def _split_rows(rows: dict[str, np.ndarray]) -> np.ndarray | None:
    """The rows whose two sides were both measured (steps.csv keeps microseconds, so a very short host side
    can read 0), or None when too few are to fit them apart."""
    if "host_s" not in rows or "device_s" not in rows:
        return None
    host, device = (np.asarray(rows[k], dtype=np.float64) for k in ("host_s", "device_s"))
    both = np.isfinite(host) & np.isfinite(device) & (host > 0) & (device > 0)
    return both if both.sum() >= 8 and both.mean() >= 0.9 else None


def device_terms(scenario: Scenario) -> list[str]:
    """The device coefficients fit_steps fits (the host ones are HOST_TERMS)."""
    names = ["flops_efficiency", "bandwidth_efficiency", "launch_overhead_per_layer_s", "per_row_layer_overhead_s"]
    if scenario.hardware.tensor_parallel_size > 1:
        names += ["interconnect_efficiency", "allreduce_latency_s"]
    return names


def fit_steps(
    scenario: Scenario,
    rows: dict[str, np.ndarray],
    measured_s: np.ndarray | None = None,
    *,
    initial: CostCoefficients | None = None,
    cuda_graphs: bool = False,
    robust: bool = False,
    num_worst: int = 5,
) -> StepFit:
    """Fit the coefficients to measured steps (rows: steps.csv's columns; measured_s: the step's seconds,
    default rows["duration_s"]). `cuda_graphs`: whether the measuring engine replayed decode steps from
    CUDA graphs. `robust`: soft-L1 loss, for live runs on a machine that other work interrupts."""
    scenario = measured_scenario(scenario, cuda_graphs)
    facts = EngineFacts.of(scenario)  # every trial's cost model prices the same engine
    base = initial or CostCoefficients()
    shape = _shape(rows)
    total = np.asarray(measured_s if measured_s is not None else rows["duration_s"], dtype=np.float64)
    device_names = device_terms(scenario)
    split = _split_rows(rows)

    def coefficients_with(names, x, start=base) -> CostCoefficients:
        return dataclasses.replace(start, **{n: float(v) for n, v in zip(names, x)})

    def fit(names, predict, target) -> FitResult:
        lo, hi, scale = zip(*(BOUNDS[n] for n in names))
        initial_values = [getattr(base, n) for n in names]
        loss = {"loss": "soft_l1", "f_scale": ROBUST_SCALE} if robust else {}
        return fit_relative(predict, target, names, initial_values, lo, hi, scale, **loss)

    results = []
    if split is not None:
        measured = {k: v[split] for k, v in shape.items()}

        def device_predict(x):
            return _sides(CostModel(facts, coefficients_with(device_names, x)), measured)[1]

        results.append(fit(device_names, device_predict, np.asarray(rows["device_s"], dtype=np.float64)[split]))
        host_names = list(HOST_TERMS)

        def host_predict(x):
            return _sides(CostModel(facts, coefficients_with(host_names, x)), measured)[0]

        results.append(fit(host_names, host_predict, np.asarray(rows["host_s"], dtype=np.float64)[split]))
    else:

        def total_predict(x):
            host, device = _sides(CostModel(facts, coefficients_with(device_names, x)), shape)
            return host + device

        results.append(fit(device_names, total_predict, total))

    names = tuple(n for r in results for n in r.names)
    values = np.concatenate([r.values for r in results])
    std = np.concatenate([r.std for r in results])
    fitted = coefficients_with(names, values)
    predicted = predict_rows(facts, fitted, rows, serial=True)
    errors = (predicted - total) / total
    at_bound = tuple(
        n for r in results for n in r.at_bound if not (n in ZERO_IS_PHYSICAL and getattr(fitted, n) < BOUNDS[n][1] / 2)
    )
    result = FitResult(names, values, std, errors, at_bound)
    classes = step_classes(rows)
    by_class = {}
    for name in CLASSES:
        chosen = np.abs(errors[classes == name])
        if len(chosen):
            by_class[name] = {
                "rows": len(chosen),
                "median": float(np.median(chosen)),
                "p90": float(np.percentile(chosen, 90)),
            }
    order = np.argsort(-np.abs(errors))[:num_worst]
    worst = [
        {
            "index": int(i),
            "class": str(classes[i]),
            "measured_s": float(total[i]),
            "predicted_s": float(predicted[i]),
            "error": float(errors[i]),
        }
        for i in order
    ]
    uncertainty = {n: float(s) for n, s in zip(names, std) if np.isfinite(s)}
    return StepFit(fitted, uncertainty, result, by_class, worst, at_bound)


# ---------------------------------------------------------------------------------------------------------
# planner calibrate --from RUN_DIR ... (the folders read by planner.calibration.run_folder)


# A least-squares fit of k coefficients to about k rows reproduces them exactly: it reports a near-zero
# error and uncertainty that say nothing about other steps. Several rows per coefficient leave residuals to
# judge the fit by, and each kind of step has to be there several times, since each pins its own terms:
# decode steps (memory-bound) bandwidth_efficiency, steps with prompt tokens (prefill or mixed: compute-bound)
# flops_efficiency.
MIN_ROWS_PER_COEFFICIENT = 5
MIN_ROWS_PER_KIND = 5


def _check_enough_rows(rows: dict[str, np.ndarray], scenario: Scenario, files: list[Path]) -> None:
    """A PlannerError unless the steps are enough to fit every coefficient fit_steps may fit."""
    classes = step_classes(rows)
    decode = int(np.sum(classes == "decode"))
    prompt = len(classes) - decode
    needed = MIN_ROWS_PER_COEFFICIENT * (len(device_terms(scenario)) + len(HOST_TERMS))
    if len(classes) < needed or min(decode, prompt) < MIN_ROWS_PER_KIND:
        names = ", ".join(str(f) for f in files)
        raise PlannerError(
            f"{names}: {len(classes):,} step rows ({decode:,} decode, {prompt:,} with prompt tokens): fitting "
            f"{needed // MIN_ROWS_PER_COEFFICIENT} coefficients needs at least {needed} rows, {MIN_ROWS_PER_KIND} "
            f"of each kind (run more requests: planner run ... --set workload.num_requests=N)"
        )


def fit_from_runs(run_dirs: list[Path], warn: Callable[[str], None] = lambda line: None) -> Profile:
    """One profile fitted to the steps of several `planner run` folders of the same model, dtype and GPU (and
    drafter: a speculative run's target terms are fitted to its steps' verifying forwards, its drafting terms to its
    drafting.csv, as `planner calibrate --device` fits them).
        `warn` hears of runs measured on a busy CPU (their stalled steps are down-weighted by the robust loss,
        but a run that was slow throughout pulls every coefficient)."""
    if not run_dirs:
        raise PlannerError("calibrate --from: give at least one `planner run --out` folder")
    runs = [read_run(Path(d)) for d in run_dirs]
    # a speculative run's steps hold their drafting in device_s: its drafting.csv takes it out (draft_fit.py)
    drafts = [read_drafting(Path(d), rows) if s.engine.speculative else None for (_, s, rows), d in zip(runs, run_dirs)]
    runs = [
        (summary, s, rows if d is None else without_drafting(rows, d)) for (summary, s, rows), d in zip(runs, drafts)
    ]
    for (summary, _, _), run_dir in zip(runs, run_dirs):
        reasons = busy_reasons(summary.get("cpu_share"), summary.get("other_cpu_load"))
        if reasons:
            warn(f"warning: {run_dir}: a busy machine ({'; '.join(reasons)}): its step times include that load")
    summary0, scenario, _ = runs[0]
    key = (scenario.model.name, scenario.dtype, scenario.hardware.gpu.name, summary0.get("device_name"))
    for (summary, other, _), run_dir in zip(runs, run_dirs):
        other_key = (other.model.name, other.dtype, other.hardware.gpu.name, summary.get("device_name"))
        if other_key != key:
            raise PlannerError(
                f"{run_dir}: measured {other_key[0]} ({other_key[1]}) as {other_key[2]} on {other_key[3]}, but "
                f"{run_dirs[0]} measured {key[0]} ({key[1]}) as {key[2]} on {key[3]}: one profile covers one of them"
            )
        if drafter_of(other) != drafter_of(scenario):
            raise PlannerError(
                f"{run_dir}: drafts with {drafter_name(other)}, but {run_dirs[0]} with {drafter_name(scenario)}: one"
                " profile's drafting terms are of one drafter (fit runs of one engine.speculative, or of none)"
            )
    names = runs[0][2].keys()
    rows = {n: np.concatenate([r[2][n] for r in runs]) for n in names if all(n in r[2] for r in runs)}
    woken = np.concatenate([woken_steps(r[2]) for r in runs])  # priced apart: the fit's form has no idle spells
    if scenario.engine.scheduler == "static":  # `planner run` refuses it now; an older folder may hold one
        raise PlannerError(
            f"{run_dirs[0]}: engine.scheduler static: its steps.csv records the padded batch the simulator prices,"
            " not the rows the live engine computed; fit runs of the continuous scheduler"
        )
    _check_enough_rows(rows, scenario, [Path(d) / "steps.csv" for d in run_dirs])
    kind = "cuda" if summary0.get("device") == "cuda" else "cpu"
    total_bytes = (summary0.get("memory") or {}).get("total_bytes") if kind == "cuda" else None
    where = str(run_dirs[0])
    gpu = measured_gpu(scenario.hardware.gpu.name, kind, summary0.get("device_name"), total_bytes, where)
    scenario = on_measured_gpu(scenario, gpu, warn, where)  # its peaks are what the efficiencies divide
    # `planner run --device cuda` replays decode steps from CUDA graphs (gpu_engine/cuda_graphs.py) unless the
    # run was eager; on CPU there are none.
    graphs = kind == "cuda" and not scenario.engine.enforce_eager
    fit = fit_steps(scenario, {k: v[~woken] for k, v in rows.items()}, robust=True, cuda_graphs=graphs)
    after_idle = {k: v[woken] for k, v in rows.items()}
    price_s = predict_rows(EngineFacts.of(measured_scenario(scenario, graphs)), fit.coefficients, after_idle, True)
    wake = wake_from_steps(after_idle["duration_s"], price_s)
    device = {
        "name": str(summary0.get("device_name") or kind),
        "kind": kind,
        "gpu": calibration_gpu(scenario.hardware.gpu).name,  # the name profiles of this GPU are looked up by
        "memory_bytes": total_bytes,
        "driver": None,
        "runtime": None,
        "torch": None,
    }
    command = "planner calibrate --from " + " ".join(str(d) for d in run_dirs)
    prof = with_wake(
        profile_from_fit(scenario, fit, "live-runs", dataclasses.asdict(scenario.engine), None, command, device), wake
    )
    if scenario.engine.speculative is None:
        return prof
    # the drafting terms, fitted to the runs' timed drafting with the target's held, as `--device` fits them
    rows_drafted = {n: np.concatenate([d[n] for d in drafts]) for n in DRAFT_COLUMNS}
    return with_drafting(prof, fit_drafting(scenario, fit.coefficients, rows_drafted, cuda_graphs=graphs))
