"""The cost model's form as the per-operator data see it: the linear term as max() (the form before), as the
2-norm (the cost model's) and as a p-norm with p fitted; the elementwise term; the rows no price follows."""

from __future__ import annotations

import itertools

import numpy as np

from planner.fidelity.fit_errors import errors, step_errors
from planner.fidelity.markdown import pct, table


def max_form(b, fe, be):
    """The linear term as max(compute, memory): the cost model's form before the 2-norm."""
    from planner.calibration import public_fit as pf

    return pf.layer_time_norm_s(b, fe, be, np.inf)


ELEMENTWISE_CHECK_TOKENS = 512


def _pairs(rows):
    """(smaller, next larger) batch sizes of one model, for every model in rows."""
    by_model: dict[str, list] = {}
    for r in rows:
        by_model.setdefault(r.model, []).append(r)
    for rs in by_model.values():
        yield from itertools.pairwise(sorted(rs, key=lambda r: r.num_tokens))


def _non_monotone(rows) -> np.ndarray:
    """Per row: whether it is one of a pair of neighbouring batch sizes (same model) where the measured layer
    takes LONGER at the smaller size; no price that grows with tokens can follow both."""
    slower = {id(r) for pair in _pairs(rows) if pair[0].layer_ms > pair[1].layer_ms for r in pair}
    return np.asarray([id(r) in slower for r in rows])


def _slower_tokens(rows) -> list[int]:
    return [a.num_tokens for a, b in _pairs(rows) if a.layer_ms > b.layer_ms]


def _widest_gap(rows) -> str:
    a, b = max(_pairs(rows), key=lambda p: p[0].layer_ms / p[1].layer_ms)
    return (
        f"{a.model}, a layer {1e3 * a.layer_ms:.0f} us at {a.num_tokens} tokens, "
        f"{1e3 * b.layer_ms:.0f} us at {b.num_tokens}"
    )


def section_form(ops, ar) -> tuple[list[str], dict]:
    """The linear term as max() (the form before), as the 2-norm (the cost model's) and as a p-norm with p
    fitted, each fitted by the same fitter to the same rows; all-reduce terms as in the profiles. Returns
    the table and the figures the note above it quotes."""
    from planner.calibration import public_fit as pf
    from planner.calibration.shipped import profiled_pairs
    from planner.calibration.transfer import load_profile

    rows, figures = [], {"p": [], "p_near_2": 0, "median_gain": [], "max_layer_p90": [], "norm_layer": []}
    figures |= {"flops_by_gpu": {}, "flops_by_gpu_without": {}, "without_p90": [], "worst_non_monotone": []}
    figures |= {"rest_p90": [], "non_monotone_rows": 0, "rows": 0}
    for gpu, tp in profiled_pairs():
        sel = [r for r in ops if r.gpu == gpu and r.tensor_parallel_size == tp]
        b = pf.batch(sel)
        profile = load_profile(gpu, tp)["coefficients"]
        before = profile | pf.fit_layers(b, max_form).as_dict()
        layer_max, step_max = step_errors(sel, ar, gpu, tp, before, max_form)
        layer_2, step_2 = step_errors(sel, ar, gpu, tp, profile)
        free = pf.fit_layers_free_norm(b)
        p, p_std = free.as_dict()[pf.NORM_NAME], free.std_dict()[pf.NORM_NAME]
        figures["p"].append(p)
        figures["p_near_2"] += abs(p - 2) <= 2 * p_std
        figures["median_gain"].append(errors(layer_2)[0] - free.median_abs_error)
        figures["max_layer_p90"].append(errors(layer_max)[1])
        figures["norm_layer"].append(errors(layer_2))
        without = pf.fit_layers(b, elementwise=False)
        figures["without_p90"].append(without.p90_abs_error)
        figures["flops_by_gpu"].setdefault(gpu, []).append(profile["flops_efficiency"])
        figures["flops_by_gpu_without"].setdefault(gpu, []).append(without.as_dict()["flops_efficiency"])
        odd = _non_monotone(sel)
        worst = np.abs(layer_2) >= np.percentile(np.abs(layer_2), 90)
        figures["worst_non_monotone"].append(odd[worst].mean())
        figures["rest_p90"].append(errors(layer_2[~odd])[1])
        figures["non_monotone_rows"] += int(odd.sum())
        figures["rows"] += len(sel)
        figures.setdefault("elementwise_share", []).extend(1 - b.linear_s / b.layer_s)
        figures.setdefault("slower_tokens", []).extend(_slower_tokens(sel))
        if gpu == "h100-sxm" and tp == 1:
            figures["example"] = _widest_gap(sel)
        large = b.num_tokens >= ELEMENTWISE_CHECK_TOKENS  # where launches no longer set their time
        ratio = (b.layer_s - b.linear_s)[large] / pf.elementwise_s(b, profile["bandwidth_efficiency"])[large]
        figures.setdefault("elementwise_ratio", {}).setdefault(gpu, []).append(float(np.median(ratio)))
        own = pf.fit_layers_elementwise_efficiency(b)
        own_e, own_std = own.as_dict(), own.std_dict()
        name = pf.ELEMENTWISE_EFFICIENCY_NAME
        figures.setdefault("own_relative_std", []).append(own_std[name] / own_e[name])
        figures.setdefault("own_gain", []).append(errors(layer_2)[1] - own.p90_abs_error)
        both = "{} / {}".format
        rows.append(
                [gpu, tp, both(*map(pct, errors(layer_max))), both(*map(pct, errors(step_max))),
                 both(*map(pct, errors(layer_2))), both(*map(pct, errors(step_2))), f"{p:.2f} ± {p_std:.2f}",
                 both(pct(free.median_abs_error), pct(free.p90_abs_error)),
                 both(pct(without.median_abs_error), pct(without.p90_abs_error)),
                 f"{without.as_dict()['flops_efficiency']:.3f} -> {profile['flops_efficiency']:.3f}",
                 f"{own_e[name]:.2f} ± {own_std[name]:.2f}: {pct(own.median_abs_error)} / {pct(own.p90_abs_error)}",
                 f"{int(odd.sum())} / {len(sel)}", pct(odd[worst].mean()), pct(errors(layer_2[~odd])[1])]
            )  # fmt: skip
    out = table(
        ["GPU", "tp", "max() layer med / p90", "max() step med / p90", "2-norm layer med / p90",
         "2-norm step med / p90", "fitted p", "free p layer med / p90", "no elementwise term: layer med / p90",
         "flops_efficiency without -> with it", "elementwise at an efficiency of its own: layer med / p90",
         "rows in pairs where the smaller batch ran slower",
         "of the worst 10% of rows",
         "layer p90 of the other rows"],
        rows,
    )  # fmt: skip
    return out, figures


FORM_NOTE = """## The cost model's form, as the per-operator data see it

The cost model prices a layer's linears as one GEMM term over all of the layer's weights, the 2-norm
sqrt(compute^2 + memory^2) (`sim.cost_model.gemm_s`; the LM head too), plus the elementwise kernels'
activation traffic at the same bandwidth (`sim.cost_model.elementwise_elements_per_token`), plus a per-layer
kernel floor (`kernel_floor_per_layer_s`, fitted {launch_lo:.0f}-{launch_hi:.0f} us per layer: a layer runs
9 kernels of a few microseconds each whatever their size; Vidur's times are the kernels' GPU durations, so a
CUDA graph keeps this time: it removes host launches, which are not in these data). It used to be max(compute, memory).
The table below fits both, and a p-norm (compute^p + memory^p)^(1/p) with p free, by the same fitter to the
same rows (`public_fit.fit_layers`, `fit_layers_free_norm`):

- **The ridge**: measured GEMMs do not turn sharply from bandwidth- to compute-bound at the ridge point
  (tokens = peak flops / bandwidth): max() fits trade the ridge off against the ends and leave
  {max_p90_lo:.1f}-{max_p90_hi:.1f}% p90 per layer, however their efficiencies are set. The 2-norm is 41%
  above max() at the ridge and within 3% of it a factor of 4 either side; it fits each layer within
  {norm_med_lo:.1f}-{norm_med_hi:.1f}% median, {norm_p90_lo:.1f}-{norm_p90_hi:.1f}% p90.
- **Why p = 2**: the free p lands at {p_lo:.2f}-{p_hi:.2f}, 2 within two standard errors in {p_near} of
  {num_fits} fits, and freeing it improves the median per-layer error by at most {gain:.1f} points: p is fixed
  at 2, no extra coefficient.
- **The elementwise kernels** (norms with their residual adds, rotary, activation; {elem_median} of a layer
  in median in these rows, up to {elem_max}) stream activations, and the norms and adds run on the whole hidden state on every rank: their
  time grows with tokens x hidden size whatever tp is, while the weights' roofline is divided by tp. Without
  a term of their own the fits absorbed them into flops_efficiency, which then fell with tp (at tp 1 to 8:
  {flops_without}). Priced as their bytes at the fitted bandwidth (no new coefficient), flops_efficiency
  is nearly one number per GPU ({flops_with}) and the per-layer p90 goes from {without_lo:.1f}-{without_hi:.1f}%
  to {norm_p90_lo:.1f}-{norm_p90_hi:.1f}% (columns "no elementwise term"). Checked against the operators
  themselves (measured norms, rotary, activation and add over the term, median over the rows of
  {check_tokens} tokens and more, tp 1-8): {elementwise_ratio}. On the A40 the bytes at the weights' streaming
  efficiency are what these kernels take; on the HBM GPUs they take more, i.e. they stream at a lower
  fraction of the bandwidth than the weights, and the rest stays in flops_efficiency (why the H100's still
  falls with tp). An efficiency of their own, fitted beside (column "elementwise at an efficiency of its
  own"), is poorly determined (standard errors {own_std_lo:.0%}-{own_std_hi:.0%} of the value) and changes
  the per-layer p90 by {own_gain_lo:+.1f} to {own_gain_hi:+.1f} points (positive: better), so it is not a coefficient.
- **What is left of the layers' p90**: batch sizes where the measured layer is SLOWER than at the next
  larger batch (the widest gap, H100 tp 1: {example}); likely the GEMM library picking another kernel
  for that shape ({share_3x:.0%} of the slower sizes are 3 x 2^k tokens, 8 of the 21 sizes measured). {non_monotone} of {rows} rows are in such pairs; on the H100 at tp
  1 and 2 they are {h100_worst} of the worst tenth of rows, and the other rows' p90 is {h100_rest}. No price
  that grows with tokens follows both sides of a pair, and a per-shape table would be a number, not a cause,
  so they are left, shown here.
- **What still misses the 5% / 10% per-step target** ({num_met} of {num_profiles} profiles meet it): where
  the layers alone meet it but the step does not ({by_allreduce}), the all-reduce (its fits are
  {ar_lo:.0f}-{ar_hi:.0f}% off in median, `fit.by_class.all_reduce` in each profile; why: "All-reduce"
  below). Where the layers themselves miss it too: {by_layers}.
"""


def form_note(ar, figures) -> str:
    from planner.calibration.shipped import profiled_pairs
    from planner.calibration.transfer import load_profile

    profiles = [load_profile(g, tp) for g, tp in profiled_pairs()]

    def meets(e: dict) -> bool:
        return e["median"] <= 0.05 and e["p90"] <= 0.10

    def names(chosen) -> str:
        return ", ".join(f"{p['device']['gpu']} tp {p['tensor_parallel_size']}" for p in chosen) or "none"

    step = [{"median": p["fit"]["median_abs_error"], "p90": p["fit"]["p90_abs_error"]} for p in profiles]
    layer = [p["fit"]["by_class"]["layer"] for p in profiles]
    launch = [1e6 * p["coefficients"]["kernel_floor_per_layer_s"] for p in profiles]
    ar_median = [
        100 * p["fit"]["by_class"]["all_reduce"]["median"] for p in profiles if "all_reduce" in p["fit"]["by_class"]
    ]
    med, p90 = zip(*figures["norm_layer"])

    def flops_ranges(by_gpu) -> str:
        return ", ".join(f"{v[0]:.2f} to {v[-1]:.2f} ({g})" for g, v in by_gpu.items())

    h100 = [i for i, p in enumerate(profiles) if p["device"]["gpu"] == "h100-sxm" and p["tensor_parallel_size"] <= 2]
    return FORM_NOTE.format(
        launch_lo=min(launch), launch_hi=max(launch),
        max_p90_lo=100 * min(figures["max_layer_p90"]), max_p90_hi=100 * max(figures["max_layer_p90"]),
        norm_med_lo=100 * min(med), norm_med_hi=100 * max(med), norm_p90_lo=100 * min(p90), norm_p90_hi=100 * max(p90),
        p_lo=min(figures["p"]), p_hi=max(figures["p"]), p_near=figures["p_near_2"], num_fits=len(figures["p"]),
        gain=100 * max(figures["median_gain"]), ar_lo=min(ar_median), ar_hi=max(ar_median),
        num_met=sum(map(meets, step)), num_profiles=len(profiles),
        flops_without=flops_ranges(figures["flops_by_gpu_without"]), flops_with=flops_ranges(figures["flops_by_gpu"]),
        without_lo=100 * min(figures["without_p90"]), without_hi=100 * max(figures["without_p90"]),
        non_monotone=figures["non_monotone_rows"], rows=figures["rows"], example=figures["example"],
        share_3x=np.mean([t % 3 == 0 for t in figures["slower_tokens"]]),
        elem_median=pct(np.median(figures["elementwise_share"])), elem_max=pct(max(figures["elementwise_share"])),
        check_tokens=ELEMENTWISE_CHECK_TOKENS,
        own_std_lo=min(figures["own_relative_std"]), own_std_hi=max(figures["own_relative_std"]),
        own_gain_lo=100 * min(figures["own_gain"]), own_gain_hi=100 * max(figures["own_gain"]),
        elementwise_ratio=", ".join(
            f"{min(v):.2f}-{max(v):.2f} ({g})" for g, v in figures["elementwise_ratio"].items()
        ),
        h100_worst=" and ".join(pct(figures["worst_non_monotone"][i]) for i in h100),
        h100_rest=" and ".join(pct(figures["rest_p90"][i]) for i in h100),
        by_allreduce=names(p for p, s, l in zip(profiles, step, layer) if meets(l) and not meets(s)),
        by_layers=names(p for p, s, l in zip(profiles, step, layer) if not meets(l) and not meets(s)),
    )  # fmt: skip
