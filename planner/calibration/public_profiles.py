"""The calibration profiles shipped in the package, fitted to public operator timings (Vidur's, MIT).

`python -m planner.calibration.public_profiles` re-fits them from the shipped data
(`planner/calibrations/vidur/*.csv`) and rewrites `planner/calibrations/<gpu>-tp<N>.yaml` (the profile
schema of planner/calibration/profile.py: source `public-operator-profiles`, model null = GPU-wide) and the
transfer table `planner/calibrations/vidur/transfer.yaml` (planner.calibration.transfer).

What a profile holds, per (GPU, tensor-parallel degree): flops_efficiency, bandwidth_efficiency and
kernel_floor_per_layer_s fitted to whole layers (public_fit; launch_overhead_per_layer_s 0: the data are kernel
durations, with no host launch in them), interconnect_efficiency,
allreduce_latency_s and allreduce_launch_wait_s fitted to NCCL all-reduce times in one NVSwitch node (none for
the A40: Vidur measured no all-reduce on it). Not in the data, so not in the profile (they keep the cost model's defaults or come from
`planner calibrate`): the CPU-side overheads (step_overhead_s, per_row_overhead_s). Attention is not in the
data either: the cost model prices it with the same bandwidth and flops efficiencies, i.e. from the fitted
kernels' bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import numpy as np
import yaml

from planner.calibration.fit import FitResult
from planner.calibration.public_data import (
    ALL_REDUCE_SETUPS,
    GPU_NAMES,
    AllReduceRow,
    OperatorRow,
    gpu_spec,
)
from planner.calibration.shipped import NO_HOST_LAUNCH, PROFILE_DIR, profile_path, profiled_pairs
from planner.scenario.yaml_loader import parse_packaged_yaml

VIDUR_NAMES = {ours: theirs for theirs, ours in GPU_NAMES.items()}
LSS_NAMES = {"rtx-4090": "RTX4090", "rtx-pro-6000": "RTXPRO6000"}  # LLMServingSim's hardware folders
DEVICE_NAMES = {
    "a100-80gb": "NVIDIA A100-SXM4-80GB",
    "a40": "NVIDIA A40",
    "h100-sxm": "NVIDIA H100 80GB HBM3",
    "rtx-4090": "NVIDIA GeForce RTX 4090",
    "rtx-pro-6000": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
}
FORMAT = "planner-calibration/1"
# Step classes by batch size: decode-sized batches are bandwidth-bound, large ones compute-bound, and the
# ridge between them is where a max(compute, memory) form was worst (sim/cost_model.py: why the 2-norm).
STEP_CLASSES = {"small_batch": (1, 64), "ridge": (65, 767), "large_batch": (768, 1 << 30)}
PROVENANCE = (
    "Fitted to Vidur's public profiling data (microsoft/vidur, data/profiling/compute/{gpu}/*/*/mlp.csv"
    "{network}; MIT licence, copyright Microsoft Corporation, "
    "planner/calibrations/vidur/LICENSE), reduced to planner/calibrations/vidur/*.csv by "
    "`python -m planner.calibration.public_data`; fitted by `python -m planner.calibration.public_profiles` "
    "with planner.calibration.fit.fit_relative. Flops/bandwidth efficiencies and the per-layer kernel floor: the "
    "cost model's linear term over all of a layer's weights (sqrt(compute^2 + memory^2), sim.cost_model.gemm_s) "
    "plus kernel_floor_per_layer_s, fitted to the measured time of whole layers (linears, norms, rotary, "
    "activation, add: sums of GPU kernel durations), in float16; launch_overhead_per_layer_s 0 (no host launch "
    "is in kernel durations). {allreduce} Not measured, so not in this profile: attention (priced by the "
    "cost model from these bandwidth/flops efficiencies), the LM head, and CPU-side overheads."
)


LSS_PROVENANCE = (
    "Fitted to LLMServingSim 2.0's public layer profiles of vLLM 0.19's kernels (casys-kaist/LLMServingSim, "
    "profiler/perf/{hardware}/*/bf16/tp{tp}/dense.csv; MIT licence, planner/calibrations/llmservingsim/LICENSE), "
    "shipped as published; fitted by `python -m planner.calibration.public_profiles` with "
    "planner.calibration.fit.fit_relative, the same form and fitter as the Vidur profiles: the linear term over all "
    "of a layer's weights (sim.cost_model.gemm_s), the elementwise kernels and kernel_floor_per_layer_s, against "
    "whole layers (norms, QKV, q/k norm, rotary, O, gate/up, activation, down) in bfloat16, measured eagerly with "
    "one hidden layer; tensor parallel 2 emulated on one GPU with each rank's shapes. {allreduce} Attention, the "
    "fused MoE, the LM head and the sampler of the same bundles are compared in docs/fidelity.md; the CPU side "
    "of a step is not in the data."
)


@dataclass(frozen=True)
class GpuFit:
    gpu: str
    tensor_parallel_size: int
    linear: FitResult
    allreduce: FitResult | None  # None where no all-reduce was measured
    step_errors: np.ndarray  # relative, per operator row
    step_tokens: np.ndarray
    layer_errors: np.ndarray

    def coefficients(self) -> dict[str, float]:
        return self.linear.as_dict() | (self.allreduce.as_dict() if self.allreduce else {}) | NO_HOST_LAUNCH

    def uncertainty(self) -> dict[str, float]:
        return self.linear.std_dict() | (self.allreduce.std_dict() if self.allreduce else {})


def fit_gpu(ops: list[OperatorRow], ar: list[AllReduceRow], gpu: str, tp: int) -> GpuFit:
    from planner.calibration import public_fit as pf

    rows = [r for r in ops if r.gpu == gpu and r.tensor_parallel_size == tp]
    b = pf.batch(rows)
    linear = pf.fit_layers(b)
    link = (gpu_spec(gpu).interconnect_bandwidth_gbps or 0) * 1e9
    ar_rows = pf.all_reduce_rows(gpu, tp, ar) if tp > 1 else []
    allreduce = pf.fit_allreduce(ar_rows, link) if ar_rows else None
    coefficients = linear.as_dict() | (allreduce.as_dict() if allreduce else {})
    measured, predicted = pf.step_times_s(b, coefficients, link, ar_rows)
    return GpuFit(gpu, tp, linear, allreduce, predicted / measured - 1, b.num_tokens, linear.relative_errors)


def _errors(e: np.ndarray) -> dict[str, float]:
    a = np.abs(e)
    return {"median": round(float(np.median(a)), 4), "p90": round(float(np.percentile(a, 90)), 4)}


def profile_dict(f: GpuFit, created: str) -> dict:
    """One shipped profile, in the schema's key order; `id` is the sha256 of the rest, as
    planner.calibration.profile.content_id computes it (YAML with sorted keys)."""
    spec = gpu_spec(f.gpu)
    by_class = {"layer": _errors(f.layer_errors)}
    if f.allreduce is not None:
        by_class["all_reduce"] = _errors(f.allreduce.relative_errors)
    for name, (lo, hi) in STEP_CLASSES.items():
        by_class[f"step_{name}"] = _errors(f.step_errors[(f.step_tokens >= lo) & (f.step_tokens <= hi)])
    setup = ALL_REDUCE_SETUPS.get(f.gpu)
    allreduce_text = (
        f"Interconnect efficiency and all-reduce latency: fitted to {setup}/all_reduce.csv, {f.tensor_parallel_size} "
        "workers in one node, sizes 2 KB - 64 MB; the eager latency split into the low state (allreduce_latency_s) "
        "and the host launch wait (allreduce_launch_wait_s, not paid under CUDA graphs; public_fit.fit_allreduce)."
        if f.allreduce is not None
        else (
            "No all-reduce measured for this GPU: interconnect_efficiency, allreduce_latency_s and "
            "allreduce_launch_wait_s are not in "
            "this profile (cost-model defaults apply)."
            if f.tensor_parallel_size > 1
            else "Tensor parallel 1: no all-reduce."
        )
    )
    body = {
        "format": FORMAT,
        "id": None,
        "created": created,
        "source": "public-operator-profiles",
        "device": {
            "name": DEVICE_NAMES[f.gpu],
            "kind": "cuda",
            "gpu": f.gpu,
            "memory_bytes": spec.memory_bytes,
            "driver": None,
            "runtime": None,
            "torch": None,
        },
        "model": None,
        "dtype": "float16" if f.gpu in VIDUR_NAMES else "bfloat16",  # as each source measured
        "tensor_parallel_size": f.tensor_parallel_size,
        "engine": {},
        "coefficients": {k: float(f"{v:.6g}") for k, v in f.coefficients().items()},
        "uncertainty": {k: float(f"{v:.3g}") for k, v in f.uncertainty().items()},
        "fit": {
            "rows": len(f.step_errors),
            "median_abs_error": _errors(f.step_errors)["median"],
            "p90_abs_error": _errors(f.step_errors)["p90"],
            "by_class": by_class,
        },
        "rows": "vidur/operators.csv" if f.gpu in VIDUR_NAMES else f"llmservingsim/{LSS_NAMES[f.gpu]}",
        "provenance": PROVENANCE.format(
            gpu=VIDUR_NAMES[f.gpu],
            network=f" and data/profiling/network/{setup}/all_reduce.csv" if f.allreduce is not None else "",
            allreduce=allreduce_text,
        )
        if f.gpu in VIDUR_NAMES
        else LSS_PROVENANCE.format(hardware=LSS_NAMES[f.gpu], tp=f.tensor_parallel_size, allreduce=allreduce_text),
    }
    import hashlib  # 15 ms of imports: only when writing

    digest = hashlib.sha256(yaml.safe_dump({k: v for k, v in body.items() if k != "id"}).encode()).hexdigest()
    body["id"] = digest[:12]
    return body


def fit_all() -> list[GpuFit]:
    from planner.calibration.lss_data import operator_rows
    from planner.calibration.public_data import load_all_reduce

    ops, ar = operator_rows(), load_all_reduce()
    return [fit_gpu(ops, ar, g, tp) for g, tp in profiled_pairs()]


@cache
def shipped_profiles() -> list[dict]:
    """Every shipped profile, parsed (one small YAML file each)."""
    return [parse_packaged_yaml(p.read_text(encoding="utf-8")) for p in sorted(PROFILE_DIR.glob("*.yaml"))]


def write_all() -> list[Path]:
    from planner.calibration import transfer

    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    fits = fit_all()
    written = []
    for f in fits:
        path = profile_path(f.gpu, f.tensor_parallel_size)
        body = profile_dict(f, now)
        if path.exists():  # a re-fit that reproduces a shipped profile keeps its date, hence its id
            old = yaml.safe_load(path.read_text(encoding="utf-8"))
            if {k: v for k, v in old.items() if k not in ("id", "created")} == {
                k: v for k, v in body.items() if k not in ("id", "created")
            }:
                body = profile_dict(f, old["created"])
        path.write_text(yaml.safe_dump(body, sort_keys=False, width=110), encoding="utf-8")
        written.append(path)
    shipped_profiles.cache_clear()
    written.append(transfer.write_table(fits))
    return written


def main() -> None:
    for path in write_all():
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
