"""Calibration's synthetic steps: a sweep-like grid priced by known coefficients, with noise, to fit."""

from __future__ import annotations

import dataclasses

import numpy as np

from sim.cost_coefficients import CostCoefficients
from sim.cost_model import CostModel
from sim.engine_facts import EngineFacts

TRUTH = CostCoefficients(
    flops_efficiency=0.45,
    bandwidth_efficiency=0.7,
    step_overhead_s=4e-4,
    per_row_overhead_s=12e-6,
    per_prompt_row_overhead_s=50e-6,
    launch_overhead_per_layer_s=25e-6,
    per_row_layer_overhead_s=2e-6,
)
FITTED = (
    "flops_efficiency",
    "bandwidth_efficiency",
    "launch_overhead_per_layer_s",
    "per_row_layer_overhead_s",
    "step_overhead_s",
    "per_row_overhead_s",
    "per_prompt_row_overhead_s",
)


def synthetic_rows(scenario, coefficients: CostCoefficients, noise: float, seed: int = 0) -> dict[str, np.ndarray]:
    """A sweep-like grid (decode batch x context, prefill chunk x cached context, mixed) priced by the serial
    cost model, each side with multiplicative noise."""
    rows = []
    for batch in (1, 4, 16, 64, 128):
        for context in (128, 1024, 4096):
            rows.append((0, batch, batch, batch * context, batch * context))  # decode
    for chunk in (64, 256, 1024, 2048):
        for cached in (0, 1024):
            rows.append((chunk, 0, 1, chunk * cached + chunk * (chunk + 1) // 2, chunk + cached))  # prefill
            rows.append(
                (chunk, 32, 33, chunk * cached + chunk * (chunk + 1) // 2 + 32 * 512, chunk + cached + 32 * 512)
            )
    prefill, decode, sampled, pairs, context = (np.array(c, dtype=np.float64) for c in zip(*rows))
    data = {
        "num_prefill_tokens": prefill,
        "num_decode_requests": decode,
        "num_sampled": sampled,
        "attention_pairs": pairs,
        "sum_context_tokens": context,
        "num_tokens": prefill + decode,
        "num_seqs": decode + (prefill > 0),
    }
    model = CostModel(
        EngineFacts.of(dataclasses.replace(scenario, engine=dataclasses.replace(scenario.engine, enforce_eager=True))),
        coefficients,
    )
    rng = np.random.default_rng(seed)
    host = model.host_s(data["num_seqs"], data["num_seqs"] - decode) * (1 + noise * rng.standard_normal(len(prefill)))
    device = model.device_s(data["num_tokens"], data["num_seqs"], sampled, pairs, context)
    device = device * (1 + noise * rng.standard_normal(len(prefill)))
    return data | {"host_s": host, "device_s": device, "duration_s": host + device}
