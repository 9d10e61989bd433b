"""The shipped profiles' fit on their own measurements: per GPU and tp, and per GPU and model."""

from __future__ import annotations

import numpy as np

from planner.fidelity.fit_errors import default_coefficients, errors, step_errors
from planner.fidelity.markdown import pct, table


def section_profiles(ops, ar) -> list[str]:
    from planner.calibration.shipped import profiled_pairs
    from planner.calibration.transfer import load_profile

    out = [
        "## Shipped profiles: fit quality on their own measurements",
        "",
        (
            "One profile per GPU and tensor-parallel degree (`planner/calibrations/<gpu>-tp<N>.yaml`). Per-layer: "
            "the cost model's linear term (sqrt(compute^2 + memory^2), plus the elementwise kernels' traffic and the "
            "per-layer launch term) against the "
            "measured time of a whole layer (every operator Vidur timed). Per-step: all layers, two all-reduces "
            "per layer at tp > 1 (measured vs the fitted all-reduce price) and the embedding: the part of a step's "
            "GPU time these data cover (no attention, LM head or CPU side). Target: per-step within 5% median, 10% p90. `spec-sheet` is today's default coefficients "
            "on the same rows."
        ),
        "",
    ]
    rows = []
    for gpu, tp in profiled_pairs():
        p = load_profile(gpu, tp)
        c = p["coefficients"]
        sel = [r for r in ops if r.gpu == gpu and r.tensor_parallel_size == tp]
        layer, step = step_errors(sel, ar, gpu, tp, c)
        _, step_default = step_errors(sel, ar, gpu, tp, default_coefficients())
        med, p90 = errors(step)
        met = "yes" if med <= 0.05 and p90 <= 0.10 else "**no**"
        coeffs = ", ".join(f"{k.replace('_efficiency', '')} {v:.3g}" for k, v in c.items())
        rows.append(
                [gpu, tp, f"`{p['id']}`", coeffs, len(sel), *map(pct, errors(layer)), pct(med), pct(p90), met,
                 "{} / {}".format(*map(pct, errors(step_default)))]
            )  # fmt: skip
    out += table(
        ["GPU", "tp", "id", "coefficients", "rows", "layer median", "layer p90", "step median", "step p90",
         "target met", "spec-sheet step med / p90"],
        rows,
    )  # fmt: skip
    return out


def section_models(ops, ar) -> list[str]:
    from planner.calibration.shipped import PROFILED_TP
    from planner.calibration.transfer import load_profile

    out = [
        "## Fit quality per GPU and model",
        "",
        (
            "Each GPU's profiles (one per tp, each on its own tp's rows), errors pooled over tp 1, 2, 4, 8 (phi-2: tp 1 "
            "only) and batch sizes 1-4096 tokens."
        ),
        "",
    ]
    rows = []
    for gpu, tps in PROFILED_TP.items():
        for model in sorted({r.model for r in ops if r.gpu == gpu}):
            layer_e, step_e = [], []
            for tp in tps:
                sel = [r for r in ops if r.gpu == gpu and r.model == model and r.tensor_parallel_size == tp]
                if sel:
                    layer, step = step_errors(sel, ar, gpu, tp, load_profile(gpu, tp)["coefficients"])
                    layer_e.append(layer)
                    step_e.append(step)
            layer_e, step_e = np.concatenate(layer_e), np.concatenate(step_e)
            rows.append([gpu, model, len(layer_e), *map(pct, errors(layer_e)), *map(pct, errors(step_e))])
    out += table(["GPU", "model", "rows", "layer median", "layer p90", "step median", "step p90"], rows)
    return out
