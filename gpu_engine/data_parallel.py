"""The live engine as a data-parallel group: N engine ranks in one process, each with its own scheduler, KV cache and
model copy, behind the shared serving model's DP balancer and lockstep (sim/dp_balancer.py), as the simulator runs
them (sim/data_parallel.py).

A mixture of experts under expert parallel: every rank holds only its own experts (vLLM's linear placement,
`determine_expert_map`: the first num_experts % N ranks one more), and each MoE layer dispatches the hidden state
of a token routed to another rank's expert to that rank (an in-process copy), which computes it with its weights,
and combines the result back (another copy). The ranks step in lockstep: while any has work, each runs a step.

Speculative decoding (n-gram or a draft head, gpu_engine/speculative.py): each rank's runner proposes the drafts of
its own verify rows and verifies them in its forward; which are accepted is each request's seeded draw in the shared
scheduler, so every rank takes the simulator's steps and accepted counts (sim/data_parallel.py).

Simplified against vLLM (and the simulator): one thread runs the ranks' forwards one after another, each whole, not
layer by layer; a rank in a lockstep step with nothing to run computes no dummy batch (it is counted, as the
simulator counts it) and no drafter passes. Each rank's step row starts when the lockstep step starts and lasts the
whole step. So the decisions (which rank gets which request, which ranks step together) are the simulator's; the
timings are of one CPU running every rank.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gpu_engine import speculative
from gpu_engine.engine import (
    CPU_THREADS,
    Arrivals,
    EngineError,
    LiveResult,
    _device,
    _peak_memory_bytes,
    warm_up,
)
from gpu_engine.model import SparseMoE
from gpu_engine.runner import ModelRunner, SamplingParams
from gpu_engine.step_execute import execute
from sim.config import Scenario
from sim.dp_balancer import balancer_score, is_dummy, lockstep_schedule, pick_rank
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown
from sim.metrics import Recorder
from sim.request import Request
from sim.scheduler import build_scheduler
from sim.workload import all_prompt_token_ids, generate_workload, make_request


def expert_ranges(num_experts: int, num_ranks: int) -> list[range]:
    """Each rank's experts, vLLM's linear placement: num_experts // N each, the first num_experts % N one more."""
    base, extra = divmod(num_experts, num_ranks)
    starts = [rank * base + min(rank, extra) for rank in range(num_ranks + 1)]
    return [range(starts[r], starts[r + 1]) for r in range(num_ranks)]


class ExpertParallelMoE(nn.Module):
    """One rank's MoE layer under expert parallel: its own experts' weights only; the others' tokens copied to
    their ranks and back. Routing as SparseMoE's, so the outputs are one engine's (to rounding)."""

    def __init__(self, moe: SparseMoE, experts: range) -> None:
        super().__init__()
        self.gate, self.top_k, self.renormalize = moe.gate, moe.top_k, moe.renormalize
        self.width, self.hidden, self.experts = moe.width, moe.hidden, experts
        w13 = moe.w13.detach().view(moe.num_experts, 2 * moe.width, moe.hidden)[experts.start : experts.stop]
        w2 = moe.w2.detach().view(moe.num_experts, moe.hidden, moe.width)[experts.start : experts.stop]
        self.w13, self.w2 = nn.Parameter(w13.clone()), nn.Parameter(w2.clone())  # [local, ...]: this rank's only
        self.peers: list[ExpertParallelMoE] = []  # every rank's layer, this one included (set by place_experts)
        self.num_dispatched = 0  # (token, expert) pairs sent to another rank

    def owner(self, expert: int) -> ExpertParallelMoE:
        return next(peer for peer in self.peers if expert in peer.experts)

    def compute(self, x: torch.Tensor, expert: int, ops) -> torch.Tensor:  # x: [n, hidden] -> [n, hidden]
        local = expert - self.experts.start
        return F.linear(ops.silu_and_mul(F.linear(x, self.w13[local])), self.w2[local])

    def forward(self, x: torch.Tensor, ops) -> torch.Tensor:  # x: [T, hidden]
        probs = torch.softmax(self.gate(x), dim=-1, dtype=torch.float32)  # [T, experts]
        weights, experts = torch.topk(probs, self.top_k, dim=-1)  # [T, k]
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        for expert in experts.unique().tolist():
            token, slot = torch.where(experts == expert)
            owner = self.owner(expert)
            if owner is self:
                y = self.compute(x[token], expert, ops)
            else:  # dispatch: a copy to the owner's memory; combine: a copy back
                sent = x[token].clone()
                y = owner.compute(sent, expert, ops).clone()
                self.num_dispatched += len(token)
            out.index_add_(0, token, y * weights[token, slot, None])
        return out


def place_experts(runners: list[ModelRunner]) -> None:
    """Every rank's MoE layers replaced by their expert-parallel share, joined to their peers."""
    ranges = expert_ranges(runners[0].spec.num_experts, len(runners))
    for index, layer in enumerate(runners[0].model.layers):
        if not isinstance(layer.mlp, SparseMoE):
            continue
        peers = [ExpertParallelMoE(r.model.layers[index].mlp, ranges[rank]) for rank, r in enumerate(runners)]
        for runner, peer in zip(runners, peers, strict=True):
            peer.peers = peers
            runner.model.layers[index].mlp = peer


def _lockstep_step(schedulers, runners, outs, clock, on_finished) -> None:
    """Every rank with a batch runs it; then each is updated and recorded as one step of the group's length."""
    start, sampled, device_s = clock(), [], []
    for out in outs:
        if not is_dummy(out):
            out.start_s = start
    blocks_in_use = [s.kv.pool.num_used_blocks for s in schedulers]
    for runner, out in zip(runners, outs, strict=True):
        executed = clock()
        sampled.append(None if is_dummy(out) else runner.execute(out.scheduled))
        device_s.append(clock() - executed)
    end = clock()
    for scheduler, out, tokens, blocks, device in zip(schedulers, outs, sampled, blocks_in_use, device_s, strict=True):
        if not is_dummy(out):
            for request in scheduler.update(out, end, tokens):
                on_finished(request)
            scheduler.record_step(out, start, clock() - start, blocks, 0.0, device)


def run_data_parallel(
    scenario: Scenario,
    device: str = "cpu",
    sampling: SamplingParams | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> LiveResult:
    """Run a data-parallel group of one-GPU ranks for real; the result is one engine's, every rank's steps in it."""
    hw, e = scenario.hardware, scenario.engine
    if hw.tensor_parallel_size > 1 or not e.num_gpu_blocks_override:
        raise EngineError(
            f"{scenario.source}: the live engine runs a data-parallel group of one-GPU ranks in one process, each"
            " KV pool of engine.num_gpu_blocks_override blocks (the ranks share this machine's memory); simulate"
            " others with `planner simulate`"
        )
    if speculative.unsupported(scenario):
        raise EngineError(f"{scenario.source}: {speculative.unsupported(scenario)}")
    facts, num_blocks, seed = EngineFacts.of(scenario), e.num_gpu_blocks_override, scenario.workload.seed
    sampling = sampling or SamplingParams()
    torch_device = _device(device)
    if torch_device.type == "cpu":
        torch.set_num_threads(CPU_THREADS)
    workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
    # the same seed: every rank the same weights, as every rank loads the same checkpoint
    runners = [
        ModelRunner(scenario.model, scenario.dtype, torch_device, None, e.block_size, seed, sampling, None, ())
        for _ in range(hw.data_parallel_size)
    ]
    lockstep = facts.expert_parallel_size > 1
    if lockstep:
        place_experts(runners)
    if e.speculative is not None:  # each rank drafts for its own verify rows (gpu_engine/speculative.py)
        runners = [speculative.SpeculativeRunner(runner, e.speculative, seed) for runner in runners]
    for runner in runners:
        runner.allocate(num_blocks)
        warm_up(facts, runner, workload, num_blocks)
        if e.speculative is not None:  # what warm-up drafted is not the run's
            runner.draft_s, runner.draft_rows = 0.0, []
    moe_layers = [layer.mlp for r in runners for layer in r.model.layers if isinstance(layer.mlp, ExpertParallelMoE)]
    for moe in moe_layers:
        moe.num_dispatched = 0  # the run's, not the warm-up's
    recorder = Recorder(num_blocks, e.block_size, record_steps=True)
    schedulers = [build_scheduler(facts, num_blocks, recorder, rank, seed=seed) for rank in range(len(runners))]
    arrivals, requests_per_rank, num_done = Arrivals(workload), [0] * len(runners), [0]
    lockstep_steps = dummy_rank_steps = 0
    busy_wall_s = 0.0  # over the steps, for speculative decoding's time shares

    def on_finished(request: Request) -> None:
        num_done[0] += 1
        arrivals.reply_done(request.finished_s, request.request_id)
        if progress is not None:
            progress(num_done[0], len(workload))

    prompts = all_prompt_token_ids(workload)  # tokenized before the run, as a server receives them (engine.py)
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0
    while any(s.num_unfinished for s in schedulers) or arrivals.due:
        for arrival_s, index in arrivals.pop_due(clock()):
            rank = pick_rank([balancer_score(s) for s in schedulers])
            requests_per_rank[rank] += 1
            schedulers[rank].add_request(make_request(workload, index, arrival_s, with_token_ids=prompts[index]))
        if not any(s.num_unfinished for s in schedulers):
            time.sleep(max(0.0, arrivals.next_s() - clock()))
            continue
        # Independent ranks (a dense model) step in turn, each its own step; a lockstep group's step is all of theirs
        step_start = clock()
        outs = (
            lockstep_schedule(schedulers)
            if lockstep
            else [s.schedule() if s.num_unfinished else None for s in schedulers]
        )
        if lockstep:
            _lockstep_step(schedulers, runners, outs, clock, on_finished)
            lockstep_steps += 1
            dummy_rank_steps += sum(map(is_dummy, outs))
        else:
            for scheduler, runner, out in zip(schedulers, runners, outs, strict=True):
                if not is_dummy(out):
                    execute(scheduler, runner, clock, on_finished, out, clock())
        busy_wall_s += clock() - step_start
    if recorder.spec is not None:  # the time shares, measured: every rank's proposing, and every step
        recorder.spec.draft_s, recorder.spec.step_s = sum(r.draft_s for r in runners), busy_wall_s
    memory = memory_breakdown(facts).to_dict()  # the model's figures: the ranks' memory is not measured apart (as
    # gpu_engine/pd_pair.py's engines)
    extra = {
        "device": torch_device.type,
        "device_name": torch.cuda.get_device_name(torch_device) if torch_device.type == "cuda" else "cpu",
        "peak_memory_bytes": _peak_memory_bytes(torch_device),
        "weights": "random",
        "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p},
        "data_parallel": {
            "data_parallel_size": len(runners),
            "requests_per_rank": requests_per_rank,
            "lockstep_steps": lockstep_steps,
            "dummy_share": dummy_rank_steps / max(lockstep_steps * len(runners), 1),
            "dispatched_pairs": sum(moe.num_dispatched for moe in moe_layers),
        },
    }
    return LiveResult(workload, recorder, memory, extra, _drafting_rows(runners) if e.speculative else None)


def _drafting_rows(runners) -> dict[str, np.ndarray]:
    """Every rank's steps that drafted, timed (sim.draft_cost.DRAFT_COLUMNS), rank after rank."""
    tables = [runner.drafting_rows() for runner in runners]
    return {name: np.concatenate([table[name] for table in tables]) for name in tables[0]}
