"""Fast analytic figures from the cost model: an upper bound on a replica's throughput, the largest batch
whose decode step meets the TPOT bound, and the best TPOT of one request alone.

The throughput bound adds up, per request, what the cost model says no schedule can avoid: the linear
layers' FLOPs of every prompt token a prefix cache cannot serve and every output token at the flops roof, or
the weight reads of its decode steps shared by the largest batch, whichever is longer (the roofline of a sum
is at least the sum's roofline), and the tensor-parallel all-reduces, on the device; the per-step and per-row
overheads on the host. Under async scheduling a step takes the longer of its two sides, so a request costs at
least the longer of its two sums (a sum of maxima is at least the max of the sums); serial, their sum.
Attention and the KV writes are left out, and every shared prefix counts as cached but for its group's first
request, so it is an upper bound. A data-parallel replica's figures are its ranks' sum (a rank's batch and KV
pool are its own; the balancer spreads the requests), each rank priced without the group's MoE layers and
all-to-all, which sim/moe_group.py adds per lockstep step: still an upper bound, and the one-request step a
lower bound. The largest batch is what `max_num_seqs` and the KV pool allow at the shortest context and, with a
TPOT bound, the largest batch whose decode step meets it (a replica whose steps are mostly slower than the bound
misses it on most requests). It prunes candidates that cannot win
and brackets the simulator's search; it is never reported as a capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.cost_coefficients import CostCoefficients
from sim.cost_model import CostModel
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown


@dataclass(frozen=True)
class Shape:
    """The workload's mean request, from its seeded draw."""

    prompt_tokens: float
    output_tokens: float
    think_time_s: float
    # Prompt tokens a prefix cache can serve: a shared prefix's (all but the last prompt token), for every
    # request of its group but the first, averaged over the requests.
    cacheable_prompt_tokens: float = 0.0
    # Output tokens per request sent (one that max_model_len rejects counts 0): the demand's token volume.
    output_tokens_per_request_sent: float = 0.0


@dataclass(frozen=True)
class Analytic:
    max_batch: int  # requests that can run at once: max_num_seqs, or what the KV pool holds at the mean prompt
    batch1_step_ms: float  # a decode step of one request: the best TPOT this candidate can give
    rate_bound: float  # requests/s per replica, an upper bound
    batch_within_tpot: int | None  # the largest batch whose decode step meets the tightest TPOT bound


def analyse(facts: EngineFacts, coefficients: CostCoefficients, shape: Shape, tpot_bound_ms: float | None) -> Analytic:
    """A replica's analytic figures (module docstring), its engine's facts priced with `coefficients`."""
    mem = memory_breakdown(facts)
    cost = CostModel(facts, coefficients)
    context = shape.prompt_tokens + 1
    kv_fit = int(mem.max_kv_tokens // context)
    max_batch = max(1, min(facts.engine.max_num_seqs, kv_fit))
    batches = np.arange(1, max_batch + 1, dtype=np.float64)
    steps_s = np.asarray(cost.step_time_s(batches, batches, batches, batches * context, batches * context))
    within = None
    batch = max_batch
    if tpot_bound_ms is not None:
        ok = np.nonzero(steps_s * 1e3 <= tpot_bound_ms)[0]
        within = int(ok[-1]) + 1 if len(ok) else 0
        batch = max(within, 1)
    request_s = _request_floor_s(cost, coefficients, shape, batch, facts.engine.enable_prefix_caching)
    ranks = facts.hardware.data_parallel_size
    return Analytic(
        max_batch * ranks, float(steps_s[0]) * 1e3, ranks / request_s, None if within is None else within * ranks
    )


def _request_floor_s(cost: CostModel, c: CostCoefficients, shape: Shape, batch: int, caching: bool) -> float:
    """Seconds of a replica's time one request costs at least (sim/cost_model.py's terms, attention and KV
    writes left out); `caching`: prefix caching is on."""
    prompt = shape.prompt_tokens - (shape.cacheable_prompt_tokens if caching else 0.0)
    tokens = prompt + max(shape.output_tokens - 1, 0)
    decode_steps = max(shape.output_tokens - 1, 0) / batch  # this request's share of the decode steps
    steps = max(decode_steps, 1 / batch)
    linear = max(tokens * cost.linear_flops_per_token / cost.flops_per_s, steps * cost.linear_bytes / cost.bytes_per_s)
    lm_head = max(
        shape.output_tokens * cost.lm_head_flops_per_row / cost.flops_per_s,
        steps * cost.lm_head_bytes / cost.bytes_per_s,
    )
    allreduce = tokens * cost.allreduce_s_per_token + steps * cost.allreduce_fixed_s
    device = linear + lm_head + allreduce
    host = steps * c.step_overhead_s + max(shape.output_tokens, 1) * c.per_row_overhead_s
    return device + host if cost.serial else max(device, host)


def users_bound(a: Analytic, shape: Shape, e2e_bound_ms: float | None) -> float | None:
    """Users a replica can hold within an end-to-end bound: users = throughput x (E2E + think) (Little's
    law) with throughput <= the rate bound. None: no latency bound, so no limit to derive."""
    if e2e_bound_ms is None:
        return None
    return a.rate_bound * (e2e_bound_ms / 1e3 + shape.think_time_s)
