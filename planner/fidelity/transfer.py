"""The honest error of transfer: leave-one-GPU-out and leave-one-model-out fits, and what each catalog GPU
gets from `public_cost_model`."""

from __future__ import annotations

import numpy as np

from planner.fidelity.fit_errors import default_coefficients, errors, step_errors
from planner.fidelity.form import max_form
from planner.fidelity.markdown import pct, table
from sim.config import HOST_DEVICES


def section_leave_gpu_out(ops, ar) -> list[str]:
    from planner.calibration import public_fit as pf
    from planner.calibration.transfer import FOLDS_PATH, load_table, load_yaml

    folds = load_yaml(FOLDS_PATH)["folds"]
    out = [
        "## Leave-one-GPU-out: the honest error of transfer",
        "",
        (
            "Each profiled GPU held out in turn; its operators predicted with efficiencies fitted jointly to the "
            "others (each row against its own GPU's spec sheet), by the rule `transferred` uses (`same_architecture`, "
            "else `same_memory`, else `all`) and by pooling both others (`all`: e.g. fit on A100 + A40, predict "
            "H100). Operator error = per-layer time (all of a layer's measured operators). Target: within 15% "
            "median. Beside it, today's spec-sheet defaults on the same held-out rows, and the max() form the cost "
            'model had before ("The cost model\'s form" above) fitted to the same sources.'
        ),
        "",
    ]
    rows = []
    for f in folds:
        gpu, tp = f["held_out"], f["tensor_parallel_size"]
        sel = [r for r in ops if r.gpu == gpu and r.tensor_parallel_size == tp]
        layer_d, step_d = step_errors(sel, ar, gpu, tp, default_coefficients())
        sources = [r for r in ops if r.gpu in f["sources"] and r.tensor_parallel_size == tp]
        before = pf.fit_layers(pf.batch(sources), max_form).as_dict()
        layer_max, _ = step_errors(sel, [], gpu, 1, before, max_form)  # layers only
        met = "yes" if f["layer_median_abs_error"] <= 0.15 else "**no**"
        rows.append(
            [gpu, " + ".join(f["sources"]), f["rule"], tp, pct(f["layer_median_abs_error"]),
             pct(f["layer_p90_abs_error"]), met, pct(f["step_median_abs_error"]), pct(f["step_p90_abs_error"]),
             "{} / {}".format(*map(pct, errors(layer_d))), "{} / {}".format(*map(pct, errors(step_d))),
             "{} / {}".format(*map(pct, errors(layer_max)))]
        )  # fmt: skip
    out += table(
        ["held out", "fitted on", "rule", "tp", "layer median", "layer p90", "<= 15%", "step median", "step p90",
         "spec-sheet layer med / p90", "spec-sheet step med / p90", "max() form layer med / p90"],
        rows,
    )  # fmt: skip
    spread = load_table()["relative_std"]
    out += [
        "",
        (
            "What `transferred` carries as uncertainty: per rule, the root-mean-square relative deviation of the "
            "transferred coefficients from the held-out GPU's own fit, over that rule's folds and tp 1-8 "
            "(`planner/calibrations/vidur/transfer.yaml`); a coefficient's std = this x its value."
        ),
        "",
    ]
    names = sorted({k for v in spread.values() for k in v})
    out += table(
        ["rule", *names], [[rule, *(pct(v.get(k, float("nan"))) for k in names)] for rule, v in spread.items()]
    )
    return out


def section_leave_models_out(ops, ar) -> list[str]:
    from planner.calibration import public_fit as pf
    from planner.calibration.shipped import PROFILED_TP

    out = [
        "## Leave-one-model-out on the same GPU",
        "",
        (
            "Per GPU and tp, efficiencies fitted to every other model, then the held-out model's layers predicted; "
            "errors pooled over tp. Beside: spec-sheet defaults."
        ),
        "",
    ]
    rows = []
    for gpu, tps in PROFILED_TP.items():
        for model in sorted({r.model for r in ops if r.gpu == gpu}):
            e, d = [], []
            for tp in tps:
                held = [r for r in ops if r.gpu == gpu and r.tensor_parallel_size == tp and r.model == model]
                rest = [r for r in ops if r.gpu == gpu and r.tensor_parallel_size == tp and r.model != model]
                if held and rest:
                    c = pf.fit_layers(pf.batch(rest)).as_dict()
                    b = pf.batch(held)
                    e.append(pf.predicted_layer_s(b, c) / b.layer_s - 1)
                    d.append(pf.predicted_layer_s(b, default_coefficients()) / b.layer_s - 1)
            if not e:  # one model measured on this GPU: nothing to hold out against
                continue
            e, d = np.concatenate(e), np.concatenate(d)
            rows.append([gpu, model, len(e), *map(pct, errors(e)), "{} / {}".format(*map(pct, errors(d)))])
    out += table(["GPU", "held-out model", "rows", "layer median", "layer p90", "spec-sheet med / p90"], rows)
    return out


def section_transfer() -> list[str]:
    from planner.calibration.transfer import TRANSFER_SOURCES, choose_sources, public_cost_model
    from planner.catalog import load_gpu_catalog

    out = [
        "## What each catalog GPU gets (`public_cost_model`, bfloat16, tp 1)",
        "",
    ]
    rows = []
    for name, gpu in load_gpu_catalog().items():
        if name in HOST_DEVICES:
            continue
        c, u, label, _ = public_cost_model(gpu, "bfloat16", 1)
        rule = "own profile" if label.startswith("calibrated") else choose_sources(name, TRANSFER_SOURCES)[1]
        cells = [f"{c[k]:.3f} ± {u[k]:.3f}" for k in ("flops_efficiency", "bandwidth_efficiency")]
        rows.append([name, rule, *cells, label])
    out += table(["GPU", "rule", "flops_efficiency", "bandwidth_efficiency", "label"], rows)
    return out
