"""The cost model fitted to measured steps: `fit_steps` (on rows with steps.csv's columns, from the sweep or
from live runs) and `predict_rows` (`planner calibrate --from RUN_DIR ...` fits run folders with them:
planner/calibration/from_runs.py).

Our measurements come from a synchronous engine (the live engine and the sweep both wait for every step),
so they are fitted with the serial form. Where the rows carry both sides of a step (`host_s`, `device_s`),
the device terms are fitted to device_s and the host terms to host_s, separately: a per-step host
overhead and a per-step launch overhead are otherwise indistinguishable in a serial total, and the
simulator needs them apart (under async scheduling only the larger side counts). Rows without them fit
the serial total with the host terms kept at their defaults.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from planner.calibration.fit import FitResult, fit_relative
from sim.config import Scenario
from sim.cost_coefficients import CostCoefficients
from sim.cost_model import CostModel
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
    "per_prompt_row_overhead_s": (0.0, 1e-2, 1e-5),
    # speculative decoding's drafting, fitted after the rest (planner/calibration/draft_fit.py)
    "draft_pass_overhead_s": (0.0, 0.1, 1e-4),
    "ngram_s_per_context_token": (0.0, 1e-4, 1e-8),
    "ngram_overhead_s": (0.0, 0.1, 1e-5),
    # the first step after idle, timed apart from the fit (planner/calibration/wake.py)
    "idle_wake_s": (0.0, 0.1, 1e-4),
}
HOST_TERMS = ("step_overhead_s", "per_row_overhead_s", "per_prompt_row_overhead_s")
# 0 where attention is one batched kernel, or where admitting a request costs the host no more than a decode row:
# not a misfit
ZERO_IS_PHYSICAL = ("per_row_layer_overhead_s", "per_prompt_row_overhead_s")
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
    f["num_prompt_rows"] = f["num_seqs"] - decode  # every row that is not a decode computes prompt tokens
    return f


def _sides(model: CostModel, s: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    device = model.device_s(
        s["num_tokens"], s["num_seqs"], s["num_sampled"], s["attention_pairs"], s["sum_context_tokens"]
    )
    host = model.host_s(s["num_seqs"], s["num_prompt_rows"])
    return np.asarray(host, dtype=np.float64), np.asarray(device, dtype=np.float64)


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
    mean_unbiased: bool = False,
    num_worst: int = 5,
) -> StepFit:
    """Fit the coefficients to measured steps (rows: steps.csv's columns; measured_s: the step's seconds,
    default rows["duration_s"]). `cuda_graphs`: whether the measuring engine replayed decode steps from
    CUDA graphs. `robust`: soft-L1 loss, for live runs on a machine that other work interrupts; `mean_unbiased`:
    then refitted so that predicted and measured time agree on average (fit.fit_relative), for steps timed one by
    one."""
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
        initial_values = [getattr(base, n) or 0.0 for n in names]  # None: not calibrated, priced as 0
        loss = {"loss": "soft_l1", "f_scale": ROBUST_SCALE} if robust else {}
        return fit_relative(predict, target, names, initial_values, lo, hi, scale, **loss, mean_unbiased=mean_unbiased)

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
    # the device and host sides are fitted apart, to different rows: no covariance between them
    covariance = np.zeros((len(names), len(names)))
    at = 0
    for r in results:
        covariance[at : at + len(r.names), at : at + len(r.names)] = r.covariance
        at += len(r.names)
    fitted = coefficients_with(names, values)
    predicted = predict_rows(facts, fitted, rows, serial=True)
    errors = (predicted - total) / total
    at_bound = tuple(
        n for r in results for n in r.at_bound if not (n in ZERO_IS_PHYSICAL and getattr(fitted, n) < BOUNDS[n][1] / 2)
    )
    result = FitResult(names, values, std, errors, at_bound, covariance)
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
