"""The SimPy driver of a data-parallel deployment (`hardware.data_parallel_size`, vLLM's --data-parallel-size): N
engine ranks, each with its own scheduler, batch and KV pool, behind vLLM's DP balancer (sim/dp_balancer.py).

- A mixture of experts under expert parallel: the ranks step in lockstep (sim/dp_balancer.py), an idle one running a
  dummy batch (a one-token forward that samples nothing). A step lasts as long as the slowest rank's: its attention
  and dense layers (its own batch, sim/cost_model.py, routed experts left out) plus the group's MoE layers, which
  the busiest GPU sets (sim/moe_group.py). With engine.enable_dbo a step whose ranks all pass vLLM's thresholds runs
  as two micro-batches whose all-to-all and compute overlap (sim/dual_batch.py).
- A dense model: the ranks are independent engines (vLLM runs non-MoE data-parallel ranks as separate engines,
  with no lockstep), each stepped as sim/replica.py steps a replica.

Speculative decoding: each rank speculates its own requests as one engine does (its scheduler's verify rows of 1 + k
tokens and lookahead slots, each request's seeded acceptance draws: the same counts on whichever rank it runs), so
a rank's tokens through the MoE layers count its verify rows' drafts; its drafting follows its forward, a drafter
model's passes collective across the ranks, dummy batches included (sim/dp_drafting.py).

Simplified: a request arriving during a lockstep step joins its rank's queue at once (async scheduling's one-step
miss is not modelled in the lockstep group), and no step is a decode window (every step is stepped).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import simpy

from sim.cost_model import IDLE_WAKE_AFTER_S, CostModel
from sim.dp_balancer import balancer_score, is_dummy, lockstep_schedule, pick_rank
from sim.dp_drafting import LockstepDrafting
from sim.draft_cost import DraftCost
from sim.dual_batch import DualBatch, DualBatchStep
from sim.engine_facts import EngineFacts
from sim.moe_group import MoeGroupCost, MoeStep
from sim.replica import Replica
from sim.request import Request
from sim.scheduler import build_scheduler
from sim.scheduler_base import Scheduler
from sim.simulation import Simulation


@dataclass
class DataParallelStats:
    """What set a lockstep group's steps, summed over the run."""

    num_ranks: int
    num_steps: int = 0
    busy_s: float = 0.0  # the steps' seconds
    experts_s: float = 0.0  # of which the busiest GPU's expert GEMMs
    all2all_s: float = 0.0  # of which dispatch and combine
    imbalance_sum: float = 0.0  # the busiest GPU's (token, expert) pairs over the mean GPU's, summed over steps
    dummy_rank_steps: int = 0  # rank-steps that were dummy batches (the rank had nothing to run)
    dbo: bool = False  # engine.enable_dbo: the steps below are counted
    split_steps: int = 0  # steps run as two micro-batches
    split_saved_s: float = 0.0  # what splitting them saved against running them whole (negative: it cost)

    def add(self, duration_s: float, moe: MoeStep, num_dummy: int) -> None:
        self.num_steps += 1
        self.busy_s += duration_s
        self.experts_s += moe.experts_s
        self.all2all_s += moe.all2all_s
        self.imbalance_sum += moe.imbalance
        self.dummy_rank_steps += num_dummy

    def add_split(self, duration_s: float, whole_s: float, split: DualBatchStep) -> None:
        """A step run as two micro-batches (whole_s: its duration unsplit): its experts both halves' GEMMs, its
        all-to-all only what the overlap left exposed."""
        self.num_steps += 1
        self.busy_s += duration_s
        self.experts_s += 2 * split.moe.experts_s
        self.all2all_s += split.exposed_all2all_s
        self.imbalance_sum += split.moe.imbalance
        self.split_steps += 1
        self.split_saved_s += whole_s - duration_s

    def to_dict(self) -> dict:
        steps, busy = max(self.num_steps, 1), self.busy_s or 1.0
        return {
            "lockstep_steps": self.num_steps,
            "all2all_share": self.all2all_s / busy,
            "experts_share": self.experts_s / busy,
            "mean_imbalance": self.imbalance_sum / steps,
            "dummy_share": self.dummy_rank_steps / (steps * self.num_ranks),
            **(self._dbo_dict() if self.dbo else {}),
        }

    def _dbo_dict(self) -> dict:
        """The split steps, and what they saved over the group's busy time had every step run whole."""
        whole_s = self.busy_s + self.split_saved_s
        return {
            "dbo_steps": self.split_steps,
            "dbo_saved_s": self.split_saved_s,
            "dbo_saved_share": self.split_saved_s / whole_s if whole_s else 0.0,
        }


class LockstepRank:
    """One rank of a lockstep group, as the router sees it."""

    def __init__(self, group: LockstepGroup, scheduler: Scheduler) -> None:
        self.group, self.scheduler = group, scheduler

    def submit(self, request: Request) -> None:
        self.scheduler.add_request(request)
        self.group.wake()

    @property
    def score(self) -> int:
        return balancer_score(self.scheduler)


class LockstepGroup:
    """vLLM's DPEngineCoreProc ranks of a mixture of experts: one SimPy process steps them all together."""

    def __init__(
        self,
        env: simpy.Environment,
        schedulers: list[Scheduler],
        cost: CostModel,
        on_finished: Callable[[Request], None],
        drafting: DraftCost | None = None,
    ) -> None:
        self.env, self.cost, self.on_finished = env, cost, on_finished
        self.moe = MoeGroupCost(cost)
        self.drafting = LockstepDrafting(drafting) if drafting is not None else None  # speculative decoding
        self.ranks = [LockstepRank(self, s) for s in schedulers]
        self.dbo = DualBatch(cost, self.moe) if cost.facts.engine.enable_dbo else None
        self.stats = DataParallelStats(len(schedulers), dbo=self.dbo is not None)
        self.idle: simpy.Event | None = None
        env.process(self.run())

    def wake(self) -> None:
        if self.idle is not None and not self.idle.triggered:
            self.idle.succeed()

    def run(self):
        env, cost = self.env, self.cost
        schedulers = [rank.scheduler for rank in self.ranks]
        after_idle = True
        woke = False  # the group waited for work, IDLE_WAKE_AFTER_S or longer, before this step (as sim/replica.py)
        while True:
            outs = lockstep_schedule(schedulers) if any(s.num_unfinished for s in schedulers) else None
            # No work, or a fleet's ranks all waiting on KV pulls (sim/fleet_dp.py): idle until a request or a pull
            if outs is None or all(map(is_dummy, outs)):
                self.idle, idle_from = env.event(), env.now
                yield self.idle
                after_idle, woke = True, env.now - idle_from >= IDLE_WAKE_AFTER_S
                continue
            wake_s = cost.idle_wake_s if woke else 0.0  # every rank waited: each pays the first step after idle
            moe = self.moe.step([1 if is_dummy(out) else out.num_tokens for out in outs])
            drafts = self.drafting.rank_s(outs) if self.drafting is not None else [0.0] * len(outs)
            sides = [self._rank_sides(out, moe, draft, wake_s) for out, draft in zip(outs, drafts, strict=True)]
            durations = [float(cost.combine(host, device, after_idle)) for host, device in sides]
            duration = max(durations)
            if self.drafting is not None:  # the slowest rank's drafting, as one engine's counts take its own
                self._count_drafting(drafts[durations.index(duration)], duration)
            split = self._split(outs)
            if split is not None:  # every rank's device time the overlapped micro-batches'
                split_s = split.device_s + wake_s
                sides, whole_s = [(host, split_s) for host, _ in sides], duration
                duration = max(float(cost.combine(host, split_s, after_idle)) for host, _ in sides)
            start, blocks = env.now, [s.kv.pool.num_used_blocks for s in schedulers]
            for out in outs:
                if not is_dummy(out):
                    out.start_s = start
            yield env.timeout(duration)
            finished = []
            for s, out, (host, device), used in zip(schedulers, outs, sides, blocks, strict=True):
                if not is_dummy(out):
                    finished += s.update(out, env.now)
                    s.record_step(out, start, duration, used, host, device)
            if split is None:
                self.stats.add(duration, moe, sum(map(is_dummy, outs)))
            else:
                self.stats.add_split(duration, whole_s, split)
            after_idle = woke = False
            for request in finished:
                self.on_finished(request)
            if finished:
                yield env.timeout(0)  # as sim/replica.py: the users whose replies completed go first

    def _split(self, outs) -> DualBatchStep | None:
        """The step as two micro-batches, if dbo is on and vLLM would split it (never with a dummy batch)."""
        if self.dbo is None or any(map(is_dummy, outs)):
            return None
        return self.dbo.step(outs)

    def _rank_sides(self, out, moe: MoeStep, draft_s: float, wake_s: float) -> tuple[float, float]:
        """(host, device) seconds of one rank's step: its own batch, or a dummy batch of one token that samples
        nothing, plus the group's MoE layers, its drafting (on the step's critical path, as sim/replica.py's) and
        the first step after idle's wake (CostCoefficients.idle_wake_s)."""
        cost = self.cost
        if is_dummy(out):
            return cost.host_s(0), cost.device_s(1, 1, 0, 1, 0) + moe.total_s + draft_s + wake_s
        # The LM head runs over every sampled row and every verified draft (the rejection sampler's logits)
        device = cost.device_s(
            out.num_tokens, out.num_seqs, out.num_sampled + out.num_draft_tokens, out.attention_pairs,
            out.sum_context_tokens,
        )  # fmt: skip
        return cost.host_s(out.num_seqs, out.num_prompt_rows), device + moe.total_s + draft_s + wake_s

    def _count_drafting(self, draft_s: float, duration_s: float) -> None:
        counts = self.ranks[0].scheduler.speculation.counts  # every rank's, shared (sim/scheduler.py)
        counts.draft_s += draft_s
        counts.step_s += duration_s


class DataParallelSimulation(Simulation):
    """A one-pool scenario whose hardware has data_parallel_size > 1: its ranks behind vLLM's DP balancer."""

    group: LockstepGroup | None = None

    @property
    def num_engines(self) -> int:
        return self.scenario.hardware.data_parallel_size  # validation refuses replicas of a data-parallel group

    def build_replicas(self, facts: EngineFacts, num_blocks: int, fast_paths: bool, fast_forward: bool, closed_loop):
        self.rank_requests = [0] * self.num_engines  # requests the balancer sent each rank
        if not facts.expert_parallel_size > 1:  # independent engines; stepped, as the balancer reads their queues
            return super().build_replicas(facts, num_blocks, fast_paths, False, closed_loop)
        seed = self.scenario.workload.seed
        schedulers = [
            build_scheduler(facts, num_blocks, self.recorder, index, fast_paths, fast_paths, seed)
            for index in range(self.num_engines)
        ]
        self.group = LockstepGroup(self.env, schedulers, self.cost, self.on_finished, self.drafting)
        return self.group.ranks

    def route(self, request: Request) -> None:
        index = pick_rank([rank_score(rank) for rank in self.replicas])
        self.rank_requests[index] += 1
        self.replicas[index].submit(request)

    def stats(self) -> dict:
        """The requests each rank was sent and, for a lockstep group, what set its steps (DataParallelStats)."""
        group = self.group.stats.to_dict() if self.group is not None else {"lockstep_steps": 0}
        return {"data_parallel_size": self.num_engines, "requests_per_rank": self.rank_requests, **group}


def rank_score(rank: LockstepRank | Replica) -> int:
    """vLLM's DP balancer score of a rank: a lockstep rank's, or an independent engine's with its deferred arrivals."""
    if isinstance(rank, LockstepRank):
        return rank.score
    return balancer_score(rank.scheduler, len(rank.deferred or ()))
