"""Fast analytic figures from the cost model: an upper bound on a replica's throughput, the load to try
first, and whether a latency bound is below what one request alone can get.

The bound ignores prefill work that can ride along decode steps and takes every running request at its
shortest context, so no simulation of the same candidate goes faster; it is used to prune candidates that
cannot win and to bracket the simulator's search, never as a reported capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config import Scenario
from sim.cost_model import CostCoefficients, CostModel
from sim.memory import memory_breakdown


@dataclass(frozen=True)
class Shape:
    """The workload's mean request, from its seeded draw."""

    prompt_tokens: float
    output_tokens: float
    think_time_s: float


@dataclass(frozen=True)
class Analytic:
    max_batch: int  # requests that can run at once: max_num_seqs, or what the KV pool holds at the mean prompt
    batch1_step_ms: float  # a decode step of one request: the best TPOT this candidate can give
    rate_bound: float  # requests/s per replica, an upper bound
    batch_within_tpot: int | None  # the largest batch whose decode step meets the tightest TPOT bound


def analyse(scenario: Scenario, coefficients: CostCoefficients, shape: Shape, tpot_bound_ms: float | None) -> Analytic:
    mem = memory_breakdown(scenario)
    cost = CostModel(scenario, coefficients)
    context = shape.prompt_tokens + 1
    kv_fit = int(mem.max_kv_tokens // context)
    max_batch = max(1, min(scenario.engine.max_num_seqs, kv_fit))
    batches = np.arange(1, max_batch + 1, dtype=np.float64)
    steps_s = np.asarray(cost.step_time_s(batches, batches, batches, batches * context, batches * context))
    decode_s = max(shape.output_tokens - 1, 0.0) * steps_s[-1] / max_batch
    prefill_s = shape.prompt_tokens * cost.linear_flops_per_token / cost.flops_per_s
    within = None
    if tpot_bound_ms is not None:
        ok = np.nonzero(steps_s * 1e3 <= tpot_bound_ms)[0]
        within = int(ok[-1]) + 1 if len(ok) else 0
    return Analytic(max_batch, float(steps_s[0]) * 1e3, 1.0 / max(decode_s, prefill_s, 1e-9), within)


def users_bound(a: Analytic, shape: Shape, e2e_bound_ms: float | None) -> float | None:
    """Users a replica can hold within an end-to-end bound: users = throughput x (E2E + think) (Little's
    law) with throughput <= the rate bound. None: no latency bound, so no limit to derive."""
    if e2e_bound_ms is None:
        return None
    return a.rate_bound * (e2e_bound_ms / 1e3 + shape.think_time_s)
