"""The checks of a sizing file that look at several of its parts at once (the scenario and its search): what
each section's own rules cannot tell. Each raises a ScenarioError naming the file, the key, the value and what
is allowed, before any simulation runs. Also how many of a probe's requests a max_model_len keeps, which the
candidates' pruning and the report read too."""

from __future__ import annotations

import dataclasses
import math

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.rules import Ctx
from planner.sizing.question import Demand, Probe, SearchSpec
from sim.config import Scenario

# Candidates a search may enumerate: the whole catalogue at 4 tensor parallel sizes is ~100; 10,000 is a sweep
# of several engine settings on top, hours of simulations; millions only fill memory before the first one.
MAX_CANDIDATES = 10_000


def check_users_have_a_wait_bound(demand: Demand, scenario: Scenario, ctx: Ctx) -> None:
    """A demand in users needs a TTFT or E2E bound: users beyond what a replica runs at once only wait longer in
    its queue, so TPOT and ITL alone hold at any number of users (a search found 11,136 users per A10)."""
    slo = scenario.slo
    if demand.kind == "users" and not (slo.ttft_ms or slo.e2el_ms):
        raise ScenarioError(
            ctx.file, "slo", NO_VALUE,
            f"a demand in users ({demand.source}) needs a TTFT or E2E bound (slo.ttft_ms or slo.e2el_ms): without"
            " one, a replica holds any number of users, the extra ones only queue longer",
        )  # fmt: skip


def check_num_candidates(s: SearchSpec, ctx: Ctx) -> None:
    """The product of the swept values, before it is built: a few values for each of a few settings multiply
    into millions of candidates, each a scenario in memory and a capacity search."""
    factors = {
        "GPUs": len(s.gpus),
        "tensor parallel sizes": len(s.tensor_parallel_sizes),
        "data parallel sizes": len(s.data_parallel_sizes),
        "expert parallel settings": len(s.expert_parallel),
        "dtypes": len(s.dtypes),
        **{f"engine.{name}": len(values) for name, values in s.engine.items()},
    }
    num_candidates = math.prod(factors.values())
    if num_candidates > MAX_CANDIDATES:
        counts = " x ".join(f"{n} {what}" for what, n in factors.items() if n > 1)
        raise ScenarioError(
            ctx.file, "search.candidates", NO_VALUE,
            f"{num_candidates:,} combinations ({counts}): at most {MAX_CANDIDATES:,}; sweep fewer values",
        )  # fmt: skip


def probe_request_counts(scenario: Scenario, probe: Probe, max_model_len: int) -> tuple[int, int]:
    """(kept, truncated): how many of a probe's requests max_model_len keeps, and how many of those it cuts
    short (longer ones are rejected or truncated as the scenario's workload.too_long says)."""
    from sim.workload import generate_workload

    workload = generate_workload(dataclasses.replace(scenario.workload, num_requests=probe.num_requests), max_model_len)
    return len(workload), workload.num_truncated


def check_pool_override(scenario: Scenario, search: SearchSpec, ctx: Ctx) -> None:
    """engine.num_gpu_blocks_override is a block count for the scenario's GPU and tensor parallel size: every
    candidate would run with that one pool, so a search over other GPUs or sizes cannot take it."""
    blocks = scenario.engine.num_gpu_blocks_override
    own_gpu, own_tp = scenario.hardware.gpu.name, scenario.hardware.tensor_parallel_size
    if blocks is None or ({g.name for g in search.gpus}, set(search.tensor_parallel_sizes)) == ({own_gpu}, {own_tp}):
        return
    raise ScenarioError(
        ctx.file, "engine.num_gpu_blocks_override", blocks,
        f"a block count for the memory of {own_gpu} at tensor parallel {own_tp}; the search's other GPUs or sizes"
        " need their own pools: remove it (each candidate's pool then comes from its memory)",
    )  # fmt: skip


def check_requests_fit(scenario: Scenario, probe: Probe, ctx: Ctx) -> tuple[int, int]:
    """The search's workload shape is a probe's requests under the scenario's max_model_len: with none kept
    there is nothing to size (simulate refuses the same workload). Returns probe_request_counts of it."""
    counts = probe_request_counts(scenario, probe, scenario.max_model_len)
    if not counts[0]:
        allowed = (
            f"all {probe.num_requests:,} requests of a probe (search.probe.num_requests) are longer (prompt +"
            " output tokens) and would be rejected; raise it or set workload.too_long: truncate"
        )
        raise ScenarioError(ctx.file, "engine.max_model_len", scenario.max_model_len, allowed)
    return counts
