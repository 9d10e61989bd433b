"""Coefficients for a GPU nobody profiled, transferred from the profiled ones by spec-sheet ratios.

The coefficients are efficiencies against a GPU's own spec sheet (dense bf16 peak, memory bandwidth,
interconnect bandwidth), so transferring them means: fit ONE set of efficiencies jointly to the source GPUs'
measured operators, each row priced against its own GPU's peaks, and apply it to the target's peaks; the
predicted times then scale by the targets' spec ratios. Which sources: the profiled GPUs of the target's
architecture generation; else those with the same kind of memory (HBM or GDDR, which sets how close to the
spec bandwidth a GPU streams); else all of them (a GPU given as a mapping, whose generation we do not know).

The uncertainty is measured, not guessed: leave-one-GPU-out over the profiled GPUs (A100-80GB, A40, H100),
each held-out GPU predicted by the same rule from the others. Per rule, the root-mean-square relative
deviation of the transferred coefficients from the held-out GPU's own fit becomes each coefficient's std,
and the operator-time errors of those folds are reported in docs/fidelity.md. The joint fits and the folds
run once, in `python -m planner.calibration.public_profiles`, into `planner/calibrations/vidur/transfer.yaml`;
`public_cost_model` only reads that file and the profiles (no scipy at start-up).
"""

from __future__ import annotations

import itertools
import math
from functools import cache

import numpy as np
import yaml

from planner.calibration.shipped import DATA_DIR, NO_HOST_LAUNCH, PROFILE_DIR, PROFILED_GPUS, profile_path
from planner.catalog import gpu_family
from planner.scenario.yaml_loader import parse_packaged_yaml
from sim.config import GpuSpec

TABLE_PATH = DATA_DIR / "transfer.yaml"  # what start-up reads: the joint fits and the measured spread
FOLDS_PATH = DATA_DIR / "transfer_folds.yaml"  # the leave-one-GPU-out folds, for docs/fidelity.md

# The profiled GPUs whose efficiencies transfer to others. Not the GeForce RTX 4090: its rated bf16 peak is
# GeForce's half-rate FP32-accumulate figure at the rated boost clock, which its GEMMs reach in full (the fit
# pins flops_efficiency at 1.0: the card clocks past its rating); the data-centre Ada parts (L4, L40, L40S, RTX
# 6000 Ada) are rated at full rate and power-limited, so 100% of their rating would be optimistic.
TRANSFER_SOURCES = ("a100-80gb", "a40", "h100-sxm", "rtx-pro-6000")
RULES = ("same_architecture", "same_memory", "all", "other_architecture")
CALIBRATED_DTYPES = ("float16", "bfloat16")  # Vidur measured float16; bf16 runs the same tensor cores


def profiled_tp(tp: int) -> int:
    """The profiled tensor-parallel degree used for `tp`: itself, or the largest power of two below (max 8)."""
    return min(8, 1 << (max(tp, 1).bit_length() - 1))


def _architecture(name: str) -> str | None:
    """The catalog's architecture generation of a GPU (planner/catalog/gpus.yaml `family`); None for an inline
    GPU. Blackwell is two: the data-centre parts (sm_100: HBM, TMEM, 2-CTA MMA) and the RTX parts (sm_120:
    GDDR7, Ada-like SMs), whose kernels differ; AMD's CDNA 3 and 4 have no profile here at all."""
    family = gpu_family(name)
    return None if family is None else family.architecture


def choose_sources(target: str, profiled: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    """The profiled GPUs a target's coefficients come from, and the rule that chose them."""
    others = tuple(g for g in profiled if g != target)
    arch = _architecture(target)
    same_arch = tuple(g for g in others if arch is not None and _architecture(g) == arch)
    if same_arch:
        return same_arch, "same_architecture"
    if arch is not None:
        memory = gpu_family(target).memory
        same_memory = tuple(g for g in others if gpu_family(g).memory == memory)
        if same_memory:
            return same_memory, "same_memory"
    return others, "all"


def subset_key(gpus) -> str:
    return "+".join(sorted(gpus))


# ---------------------------------------------------------------------------------------------------------
# Building the table (at fit time)


def joint_fit(ops, ar, gpus: tuple[str, ...], tp: int) -> dict[str, float]:
    """One set of efficiencies fitted to all `gpus`' operator (and all-reduce) rows at tensor parallel tp."""
    from planner.calibration import public_fit as pf
    from planner.calibration.public_data import gpu_spec

    b = pf.batch([r for r in ops if r.gpu in gpus and r.tensor_parallel_size == tp])
    coefficients = pf.fit_layers(b).as_dict()
    if tp > 1:
        ar_rows, links = [], []
        for g in gpus:
            rows = pf.all_reduce_rows(g, tp, ar)
            ar_rows += rows
            links += [gpu_spec(g).interconnect_bandwidth_gbps * 1e9] * len(rows)
        if ar_rows:
            coefficients |= pf.fit_allreduce(ar_rows, np.asarray(links)).as_dict()
    return coefficients


def write_table(fits) -> str:
    """Joint fits for every subset of the profiled GPUs (at each tp some of them were measured at), and the
    folds: each profiled GPU held out, predicted by the rule `transferred` would use, by all the others, and by
    the GPUs of other architectures only (leave-one-architecture-out: what a GPU of an unprofiled
    architecture gets)."""
    from planner.calibration import public_fit as pf
    from planner.calibration.lss_data import operator_rows
    from planner.calibration.public_data import gpu_spec, load_all_reduce
    from planner.calibration.shipped import PROFILED_TP, TENSOR_PARALLEL_SIZES

    ops, ar = operator_rows(), load_all_reduce()
    own = {(f.gpu, f.tensor_parallel_size): f.coefficients() for f in fits}
    joint: dict[str, dict[int, dict[str, float]]] = {}
    for n in range(1, len(PROFILED_GPUS) + 1):
        for gpus in itertools.combinations(PROFILED_GPUS, n):
            measured_tps = [tp for tp in TENSOR_PARALLEL_SIZES if any(tp in PROFILED_TP[g] for g in gpus)]
            joint[subset_key(gpus)] = {
                tp: {k: float(f"{v:.6g}") for k, v in joint_fit(ops, ar, gpus, tp).items()} for tp in measured_tps
            }
    folds = []
    for held_out in PROFILED_GPUS:
        chosen, rule = choose_sources(held_out, TRANSFER_SOURCES)
        others = tuple(g for g in TRANSFER_SOURCES if g != held_out)
        candidates = {(chosen, rule), (others, "all")}
        other_arch = tuple(g for g in others if _architecture(g) != _architecture(held_out))
        candidates.add((other_arch, "other_architecture"))
        for sources, fold_rule in sorted(candidates, key=lambda c: RULES.index(c[1])):
            for tp in PROFILED_TP[held_out]:
                coefficients = fill_interconnect(joint, sources, tp, held_out)
                b = pf.batch([r for r in ops if r.gpu == held_out and r.tensor_parallel_size == tp])
                layer_err = pf.predicted_layer_s(b, coefficients) / b.layer_s - 1
                ar_rows = pf.all_reduce_rows(held_out, tp, ar) if tp > 1 else []
                link = (gpu_spec(held_out).interconnect_bandwidth_gbps or 0) * 1e9
                measured, predicted = pf.step_times_s(b, coefficients, link, ar_rows)
                step_err = predicted / measured - 1
                deviation = {
                    k: float(f"{coefficients[k] / v - 1:.4g}")
                    for k, v in own[held_out, tp].items()
                    if k in coefficients and abs(v) > NEGLIGIBLE[k.endswith("_s")]
                }
                folds.append(
                    {
                        "held_out": held_out,
                        "sources": list(sources),
                        "rule": fold_rule,
                        "tensor_parallel_size": tp,
                        "layer_median_abs_error": round(float(np.median(np.abs(layer_err))), 4),
                        "layer_p90_abs_error": round(float(np.percentile(np.abs(layer_err), 90)), 4),
                        "step_median_abs_error": round(float(np.median(np.abs(step_err))), 4),
                        "step_p90_abs_error": round(float(np.percentile(np.abs(step_err), 90)), 4),
                        "coefficient_relative_deviation": deviation,
                    }
                )
    table = {"joint": joint, "relative_std": relative_std(folds)}
    TABLE_PATH.write_text(yaml.safe_dump(table, sort_keys=False, width=110), encoding="utf-8")
    FOLDS_PATH.write_text(yaml.safe_dump({"folds": folds}, sort_keys=False, width=110), encoding="utf-8")
    load_table.cache_clear()
    return TABLE_PATH


# A held-out GPU's own coefficient this small (a kernel floor fitted at 0.1 us: the RTX GPUs' layers need none) has
# no relative deviation to speak of: a transferred 30 us floor would read as 3e8 times off.
NEGLIGIBLE = {True: 1e-7, False: 1e-6}


def joint_at(joint, sources, tp: int) -> dict[str, float]:
    """The sources' joint fit at tp, or where none of them was measured at tp (the RTX 4090 at tp 2), at the
    largest tp below that they were: a GPU's efficiencies against its own peaks, priced over tp's shapes."""
    fits = joint[subset_key(sources)]
    at = max((t for t in fits if t <= tp), default=min(fits))
    return dict(fits[at])


def fill_interconnect(joint, sources, tp: int, held_out: str | None = None) -> dict[str, float]:
    """The sources' joint coefficients; where none of them has a measured all-reduce (the A40, the RTX GPUs),
    the interconnect terms of all profiled GPUs that have one (NVSwitch nodes: optimistic for PCIe parts), but
    the held-out GPU of a leave-one-GPU-out fold: its own all-reduces once filled in the A40's terms in the fold
    that held out the A100, and the interconnect spread came out at 30% where the honest fold gives about 64%."""
    coefficients = joint_at(joint, sources, tp)
    if tp > 1 and "interconnect_efficiency" not in coefficients:
        allowed = [
            k for k in joint if held_out not in k.split("+") and "interconnect_efficiency" in joint[k].get(tp, {})
        ]
        with_ar = max(allowed, key=len)
        for k in ("interconnect_efficiency", "allreduce_latency_s", "allreduce_launch_wait_s"):
            coefficients[k] = joint[with_ar][tp][k]
    return coefficients


def relative_std(folds) -> dict[str, dict[str, float]]:
    """Per rule: root-mean-square relative deviation of each transferred coefficient over that rule's folds."""
    out = {}
    for rule in RULES:
        devs: dict[str, list[float]] = {}
        for f in folds:
            if f["rule"] == rule:
                for k, v in f["coefficient_relative_deviation"].items():
                    devs.setdefault(k, []).append(v)
        if devs:
            out[rule] = {k: round(float(np.sqrt(np.mean(np.square(v)))), 4) for k, v in devs.items()}
    return out


# ---------------------------------------------------------------------------------------------------------
# Using it (at start-up: a YAML file or two, no scipy)


def load_yaml(path) -> dict:
    return parse_packaged_yaml(path.read_text(encoding="utf-8"))


@cache
def load_table() -> dict:
    return load_yaml(TABLE_PATH)


@cache
def load_profile(gpu: str, tp: int) -> dict | None:
    """One shipped profile, or None: start-up reads only the files it needs."""
    path = profile_path(gpu, tp)
    return load_yaml(path) if path.exists() else None


def transfer(gpu: GpuSpec, tensor_parallel_size: int) -> tuple[dict, dict, tuple[str, ...], str]:
    """(coefficients, std per coefficient, source profile ids, rule) for `gpu`, from the profiled GPUs.
    The std is the coefficient times the spread leave-one-GPU-out measured for the rule that chose them."""
    sources, rule = choose_sources(gpu.name, TRANSFER_SOURCES)
    table = load_table()
    tp = profiled_tp(tensor_parallel_size)
    coefficients = NO_HOST_LAUNCH | fill_interconnect(table["joint"], sources, tp)
    profiles = [nearest_profile(g, tp) for g in sources]
    ids = tuple(p["id"] for p in profiles)
    return coefficients, _spread(coefficients, rule) | _widest_residual(profiles), ids, rule


def nearest_profile(gpu: str, tp: int) -> dict:
    """A profiled GPU's shipped profile at tp, or at the largest tp below that it was measured at."""
    from planner.calibration.shipped import PROFILED_TP

    return load_profile(gpu, max((t for t in PROFILED_TP[gpu] if t <= tp), default=min(PROFILED_TP[gpu])))


def _widest_residual(profiles: list[dict]) -> dict[str, float]:
    """The widest of the profiles' fit residual spreads: what even a GPU's own coefficients leave unexplained
    step by step. A transferred GPU is known no better than the measured ones it comes from (without it, the
    A100-40GB's TPOT interval came out narrower than the measured A100-80GB's)."""
    from planner.calibration.provenance import residual_spread

    spreads = [residual_spread(p.get("fit")) for p in profiles]
    return max(spreads, key=lambda s: sum(s.values()), default={})


def _spread(coefficients: dict, rule: str) -> dict:
    spread = load_table()["relative_std"]
    spread = spread.get(rule) or spread["all"]  # a rule no fold exercised (none today): the widest spread
    return {k: abs(v) * spread[k] for k, v in coefficients.items() if k in spread}


def _all_reduce_terms(own: dict, gpu: str, tp: int) -> dict[str, float]:
    """The all-reduce terms a GPU's own profile lacks at tp > 1 (the A40: no all-reduce was measured on it),
    from the profiled GPUs that have them: rather than spec-sheet defaults without a spread, said to be
    calibrated. {} where the profile has them, or at tp 1."""
    if tp == 1 or "interconnect_efficiency" in own["coefficients"]:
        return {}
    filled = fill_interconnect(load_table()["joint"], (gpu,), tp)
    return {k: v for k, v in filled.items() if k not in own["coefficients"]}


def public_cost_model(
    gpu: GpuSpec, dtype: str, tensor_parallel_size: int, quantized: bool = False
) -> tuple[dict, dict, str, tuple[str, ...]]:
    """The shipped coefficients for `gpu`: its own public profile where one was measured (same GPU, tensor
    parallel degree, a float16/bfloat16 model with unquantised weights: Vidur's), else transferred. Returns
    (coefficients, std per coefficient, label, the source profiles' ids). Coefficients not in the dict (the
    CPU-side overheads) keep the cost model's defaults."""
    tp = profiled_tp(tensor_parallel_size)
    own = load_profile(gpu.name, tp)
    if own is not None and tp == tensor_parallel_size and dtype in CALIBRATED_DTYPES and not quantized:
        from planner.calibration.provenance import residual_spread

        terms = _all_reduce_terms(own, gpu.name, tp)
        coefficients = dict(own["coefficients"]) | terms
        uncertainty = dict(own["uncertainty"]) | residual_spread(own.get("fit")) | _spread(terms, "all")
        label = f"calibrated (public profile {own['id']}, {gpu.name})"
        if terms:
            label = f"calibrated (public profile {own['id']}, {gpu.name}; all-reduce transferred from profiled GPUs)"
        return coefficients, uncertainty, label, (own["id"],)
    if own is not None:
        # Its own profile at another tp or dtype, or for quantised weights (other GEMM kernels): the nearest
        # measurement, but no fold measured that step, so it carries the widest spread leave-one-GPU-out measured.
        coefficients, ids = dict(own["coefficients"]) | _all_reduce_terms(own, gpu.name, tp), (own["id"],)
        sources = [f"{gpu.name} tp{tp} {own['id']}"]
        uncertainty = _spread(coefficients, "all") | _widest_residual([own])
    else:
        coefficients, uncertainty, ids, _ = transfer(gpu, tensor_parallel_size)
        names, _ = choose_sources(gpu.name, TRANSFER_SOURCES)
        sources = [f"{name} {profile_id}" for name, profile_id in zip(names, ids)]
    uncertainty, caveat = _unprofiled(gpu.name, uncertainty)
    return coefficients, uncertainty, f"transferred (from public profiles {', '.join(sources)}){caveat}", ids


SPREAD_PATH = PROFILE_DIR / "measurements" / "spread.yaml"  # written by `python -m planner.fidelity --write-spread`


def _unprofiled(name: str, uncertainty: dict) -> tuple[dict, str]:
    """A GPU of a vendor or an architecture no profile measured is known only as well as the evidence says:
    its step time carries the spread the development set shows for another vendor (AMD: the simulated
    against the published figures of its points), or the leave-one-architecture-out folds show for another
    architecture, whichever applies, where that is wider than its coefficients' own; the label says which."""
    spreads = load_yaml(SPREAD_PATH)
    family, arch = gpu_family(name), _architecture(name)
    if family is not None and family.vendor != "nvidia":
        spread, why = spreads["other_vendor"], f"another vendor ({family.vendor.upper()}): no profile"
    elif arch is None or not any(_architecture(g) == arch for g in PROFILED_GPUS):
        spread, why = spreads["other_architecture"], "an architecture without a profile"
    else:
        return uncertainty, ""
    return _widened(uncertainty, spread, why)


def unmeasured_kernels(uncertainty: dict) -> tuple[dict, str]:
    """A model whose attention no profile measured (DeepSeek's multi-head latent attention, with its fp8
    block-scaled experts): its step time carries the spread the development set shows for such models on
    profiled GPUs (vLLM's DeepSeek-R1 points on 8x H200), where wider than what it carries already."""
    return _widened(uncertainty, load_yaml(SPREAD_PATH)["unmeasured_attention"], "MLA attention: no kernel measured")


def _widened(uncertainty: dict, spread: float, why: str) -> tuple[dict, str]:
    from planner.calibration.provenance import STEP_TIME_SPREAD

    wider = max(spread, uncertainty.get(STEP_TIME_SPREAD, 0.0))
    factor = math.exp(1.645 * wider)
    caveat = f"; {why}: step times within x{1 / factor:.2f}-x{factor:.2f} at 90%"
    return uncertainty | {STEP_TIME_SPREAD: wider}, caveat
