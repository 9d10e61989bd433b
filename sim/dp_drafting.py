"""Speculative decoding's drafting in a lockstep data-parallel group (sim/data_parallel.py): each rank's drafting
seconds in one lockstep step.

Each rank speculates its own running requests as one engine does (its scheduler's verify rows and lookahead slots,
sim/speculation.py); what the group adds is that a drafter model's passes are collective too. vLLM runs MTP through
the EAGLE proposer (vllm/v1/spec_decode/eagle.py: `propose`, one pass over the step's tokens, then k - 1 passes of
one token per row), and every pass pads its batch across the DP ranks (`_pad_batch_across_dp`, an all-reduce of
the ranks' token counts) before its forward; an MTP layer of a mixture of experts is itself an MoE layer whose
tokens are dispatched to their experts' GPUs. A rank with nothing to run joins them: its dummy batch
(DPEngineCoreProc's `execute_dummy_batch`, vllm/v1/engine/core.py -> `_dummy_run`,
vllm/v1/worker/gpu_model_runner.py) runs the drafter's `dummy_run`, the same k passes of one token (eagle.py). So each of the k passes lasts as long as the slowest rank's pass, plus,
for an MoE drafter under expert parallel, its routed experts and all-to-all priced for the group
(sim/moe_group.py) from every rank's tokens in that pass; every rank spends the sum. The n-gram lookup has no model
and no collective: each rank's is its own host work, after its own forward (sim/draft_cost.py).

Simplified: a rank whose batch samples no row (prefill chunks only) runs the later passes padded to one token, as a
dummy rank does, whenever another rank drafts (vLLM's ranks must meet in every pass's collectives).
"""

from __future__ import annotations

from sim.dp_balancer import is_dummy
from sim.draft_cost import DraftCost
from sim.moe_group import MoeGroupCost
from sim.scheduler_output import SchedulerOutput


class LockstepDrafting:
    """A lockstep group's drafting seconds per rank and step."""

    def __init__(self, drafting: DraftCost) -> None:
        self.drafting = drafting
        drafter = drafting.drafter
        # An MoE drafter under expert parallel (DeepSeek's MTP layer): its own cost model leaves its routed experts
        # out (sim/cost_model.py), priced for the group per pass instead
        moe = drafter is not None and drafter.facts.model.num_moe_layers and drafter.facts.expert_parallel_size > 1
        self.moe = MoeGroupCost(drafter) if moe else None

    def rank_s(self, outs: list[SchedulerOutput | None]) -> list[float]:
        """Each rank's drafting seconds in the step whose batches are `outs` (None or empty: a dummy batch)."""
        d = self.drafting
        if d.drafter is None:  # ngram: each rank's own lookup over its sampling rows' contexts
            return [0.0 if is_dummy(out) else d.step_s(out) for out in outs]
        first = [self._first_pass(out) for out in outs]
        total = self._group_pass_s(first)
        if d.k > 1 and any(not is_dummy(out) and out.num_sampled for out in outs):
            total += (d.k - 1) * self._group_pass_s([self._later_pass(out) for out in outs])
        return [total] * len(outs)

    def _group_pass_s(self, passes: list[tuple[float, int]]) -> float:
        """One collective pass of (seconds, tokens) per rank: the slowest rank's, and the group's routed experts."""
        slowest = max(seconds for seconds, _ in passes)
        return slowest + (self.moe.step([tokens for _, tokens in passes]).total_s if self.moe is not None else 0.0)

    def _first_pass(self, out: SchedulerOutput | None) -> tuple[float, int]:
        """(seconds, tokens) of a rank's first drafter pass: over its step's tokens, or a dummy's one token."""
        d = self.drafting
        if is_dummy(out):
            return self._dummy_pass_s(), 1
        pass_s = d.first_pass_s(out.num_tokens, out.num_seqs, out.num_sampled, out.attention_pairs,
                                out.sum_context_tokens)  # fmt: skip
        return pass_s, out.num_tokens

    def _later_pass(self, out: SchedulerOutput | None) -> tuple[float, int]:
        """(seconds, tokens) of one of a rank's k - 1 later passes: one token per drafting row, or padded to one."""
        if is_dummy(out) or not out.num_sampled:
            return self._dummy_pass_s(), 1
        return self.drafting.later_pass_s(out.num_sampled, out.sum_context_tokens), out.num_sampled

    def _dummy_pass_s(self) -> float:
        """A one-token pass that samples nothing (the drafter's dummy_run), as a dummy batch's target forward."""
        return self.drafting.drafter.device_s(1, 1, 0, 1, 0) + self.drafting.pass_overhead_s
