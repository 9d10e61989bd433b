"""docs/fidelity.md's section on LLMServingSim's profiles of vLLM 0.19's kernels (RTX 4090, RTX PRO 6000):
each term of the cost model against the kernels measured, per bundle (GPU, model, tp), and the gate's figures
for them."""

from __future__ import annotations

from functools import cache

import numpy as np

from planner.fidelity.markdown import pct, table
from sim.cost_coefficients import CostCoefficients

DEFAULTS = CostCoefficients()


def _stats(errors) -> tuple[float, float]:
    a = np.abs(np.asarray(errors))
    return float(np.median(a)), float(np.percentile(a, 90))


@cache
def bundle_errors() -> dict[tuple[str, str, int], dict[str, np.ndarray]]:
    """(GPU, model, tp) -> term -> relative errors per measured row."""
    from planner.calibration import lss_data as data
    from planner.calibration import lss_fit as fit
    from planner.calibration.transfer import nearest_profile

    out = {}
    for b in data.bundles():
        profile = nearest_profile(b.gpu, b.tensor_parallel_size)["coefficients"]
        r = fit.rates(b, profile)
        terms: dict[str, np.ndarray] = {}
        if data.dense_rows(b):
            terms["dense layer"] = fit.dense_fit(b).relative_errors
        moe = fit.fit_moe(b, r)
        if moe is not None:
            terms["fused MoE, today's form"] = fit.moe_dense_form_errors(b, r)
            terms["fused MoE, tiles + fixed time"] = moe.relative_errors
        terms["LM head"] = fit.lm_head_errors(b, r)
        terms["sampler (fixed + logit passes)"] = fit.fit_sampler(b, r).relative_errors
        terms["attention, today's form"] = fit.attention_sim_errors(b, r)
        terms["attention, the simulator's"] = fit.attention_sim_errors(
            b,
            r,
            DEFAULTS.attention_floor_per_layer_s,
            DEFAULTS.attention_flops_ratio,
            DEFAULTS.mixed_step_attention_factor,
        )
        terms["attention, query tiles + fixed + mixed-step decode"] = fit.fit_attention_tiled(b).relative_errors
        out[b.gpu, b.model, b.tensor_parallel_size] = terms
    return out


def tracked() -> dict[str, float]:
    out = {}
    for (gpu, model, tp), terms in bundle_errors().items():
        for term, e in terms.items():
            med, p90 = _stats(e)
            name = "attention_tiled" if "tiles +" in term and "attention" in term else term.split(",")[0].split(" (")[0]
            key = f"lss.{gpu}.{model}.tp{tp}.{name.replace(' ', '_')}"
            if "today's form" in term:
                continue  # the form the simulator left: shown, not held
            out[key + ".median"] = round(med, 4)
            out[key + ".p90"] = round(p90, 4)
    return out


def section() -> list[str]:
    rows = []
    for (gpu, model, tp), terms in bundle_errors().items():
        for term, e in terms.items():
            med, p90 = _stats(e)
            signed = float(np.median(e))
            rows.append([gpu, model, tp, term, len(e), pct(med), pct(p90), pct(signed)])
    return [
        "## vLLM 0.19's kernels: attention, fused MoE, LM head and sampler (LLMServingSim's profiles)",
        "",
        (
            "LLMServingSim 2.0's per-layer profiles (casys-kaist/LLMServingSim, MIT; `planner/calibrations/"
            "llmservingsim/`), measured eagerly with one hidden layer, tp 2 emulated on one GPU with each rank's "
            "shapes (no all-reduce in them). Each term of the cost model against the measured kernels "
            "(`planner.calibration.lss_fit`): the dense layer is the shipped profile's fit (the same form as "
            "Vidur's, above; the MoE model's dense rows hold no MLP and are not fitted); the other terms use that "
            "profile's efficiencies, with only the fixed times, the sampler's logit passes and attention's own "
            "coefficients fitted. `today's form` is what the simulator priced before these data: attention as "
            "max(causal pairs' flops, the K/V read once) at the dense efficiencies, 60-79% too fast in median: it "
            "missed the kernel's fixed time of ~12 us per layer, prefill computed in query tiles at a lower "
            "efficiency, and decode rows in a step with a prefill chunk running through the varlen prefill kernel "
            "at 1.9-3.7x their decode time. `the simulator's` is what it prices now from the step's totals: the "
            "fixed time (`attention_floor_per_layer_s`), attention's flops at `attention_flops_ratio` of the "
            "dense efficiency, and a mixed step's K/V reads at `mixed_step_attention_factor` (the medians of those "
            "two fitted per bundle). The query-tile form, fitted per bundle with the rows' own shapes, is shown as "
            "the evidence: it needs each row's chunk and context, which a step's totals do not give, and its p90 "
            "of 41-61% says neither form follows every shape yet. Eager kernel times carry over to CUDA-graph "
            "replays as the kernels' own durations: a graph removes host launches, not kernel time, so these fixed "
            "times stay under graphs."
        ),
        "",
        *table(["GPU", "model", "tp", "term", "rows", "median", "p90", "median signed"], rows),
    ]
