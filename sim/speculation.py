"""Speculative decoding on the shared scheduler: how many tokens a decoding request's step verifies, the lookahead
slots it holds, and what the step leaves of them (vLLM v1, vllm/v1/core/sched/scheduler.py).

vLLM's scheduler has no speculative phase: a request's `num_tokens_with_spec` counts its k drafted tokens, so a
decoding request is scheduled `1 + k` tokens (its new token and the drafts; fewer when the token budget or
max_model_len - 1 cut them), `allocate_slots(..., num_lookahead_tokens)` also holds slots for the drafter to write
the next drafts' KV (k for the model-based methods, 0 for n-gram), and after the step
`update_from_output` takes the rejected drafts back off `num_computed_tokens`; the request gains the accepted drafts
and one more token (the target's at the first rejection, or the bonus one), trimmed at max_tokens
(`_update_request_with_output`). The slots of rejected drafts stay with the request (the next step writes over
them), as in vLLM: no block is freed on rejection. Prefills are not speculated: drafts exist only for a request
whose last step sampled, so a prompt chunk never carries any.

Where the planner simplifies: which drafts the target accepts is not computed but drawn (sim/acceptance.py), per
request and output position, from the scenario's acceptance rates, in the simulator and the live engine alike; the
drafter's proposals are not tokens in the simulator. The counts vLLM reports (`SpecDecodingStats`:
num_drafts, num_draft_tokens, num_accepted_tokens, per position) are kept in `SpecDecodeCounts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from sim.acceptance import AcceptanceDraws, resolve
from sim.config import ModelSpec, SpeculativeConfig
from sim.draft_model import drafts_with_lookahead
from sim.request import Request


class VerifiedTokens(NamedTuple):
    """The live engine's result of a verify row: the drafts it verified, and the target's token at each position
    (after 0, 1, ... k drafts). Which drafts count as accepted is the scheduler's seeded draw (random weights accept
    nothing), so the reply continues with the accepted drafts and the target's token after them."""

    drafts: list[int]
    targets: list[int]

    def output(self, accepted: int, gained: int) -> list[int]:
        return (self.drafts[:accepted] + [self.targets[accepted]])[:gained]


@dataclass
class SpecDecodeCounts:
    """What vLLM's SpecDecodingStats counts (vllm/v1/spec_decode/metrics.py), summed over the run, and the seconds
    the cost model or the live engine spent drafting and verifying (steps that verified drafts)."""

    method: str
    num_spec_tokens: int
    acceptance_source: str  # the scenario's rates or length, or the published default it fell back to
    num_drafts: int = 0  # decode steps of a request that verified at least one draft
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    draft_s: float = 0.0  # drafting: the drafter's passes (device) or the n-gram lookup (host)
    step_s: float = 0.0  # every step's duration, for the shares

    def __post_init__(self) -> None:
        self.accepted_per_pos = [0] * self.num_spec_tokens

    def to_dict(self) -> dict:
        """vLLM's names: the counters of its Prometheus metrics (vllm:spec_decode_*) and the figures its
        SpecDecodingLogging prints (mean acceptance length = 1 + accepted / drafts; draft acceptance rate =
        accepted / draft tokens; per-position acceptance rate = accepted at position i / drafts)."""
        drafts = self.num_drafts
        return {
            "method": self.method,
            "num_speculative_tokens": self.num_spec_tokens,
            "acceptance_source": self.acceptance_source,
            "num_drafts": drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(self.accepted_per_pos),
            "mean_acceptance_length": 1 + self.num_accepted_tokens / drafts if drafts else float("nan"),
            "draft_acceptance_rate": (
                self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else float("nan")
            ),
            "acceptance_rate_per_pos": [n / drafts if drafts else float("nan") for n in self.accepted_per_pos],
            # The planner's own: the share of the busy time spent drafting, and verifying (the rest of the steps)
            "draft_time_share": self.draft_s / self.step_s if self.step_s else 0.0,
            "verify_time_share": 1 - self.draft_s / self.step_s if self.step_s else 0.0,
        }


class Speculation:
    """One engine's speculative decoding as its scheduler applies it: the drafts per step, the lookahead slots, the
    seeded acceptance of each request, the counts."""

    def __init__(
        self, spec: SpeculativeConfig, target: ModelSpec, seed: int, max_model_len: int, block_size: int
    ) -> None:
        self.spec = spec
        self.k = spec.num_speculative_tokens
        rates, self.draft_rate, self.source = resolve(spec, target)
        self.rates = np.array(rates, dtype=np.float64)
        self.lookahead = drafts_with_lookahead(spec)
        self.seed = seed
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.counts = SpecDecodeCounts(spec.method, self.k, self.source)

    def draws(self, request: Request) -> AcceptanceDraws:
        draws = request.spec_draws
        if draws is None:  # made at the request's first decode step, dropped when it finishes
            draws = request.spec_draws = AcceptanceDraws(
                self.seed, request.request_id, self.rates, self.draft_rate, request.max_output_tokens
            )
        return draws

    def plan(self, request: Request, budget: int) -> tuple[int, int]:
        """(tokens to schedule, tokens to hold slots for) of a decoding request's step: its new token and its
        drafts within the budget and below max_model_len, as vLLM's schedule(); the slots reach num_lookahead_tokens
        beyond them (allocate_slots caps them at max_model_len)."""
        computed = request.num_computed_tokens
        drafts = self.k if self.draws(request).drafts_at(request.num_output_tokens) else 0
        # A reply ends by max_model_len (sim/workload.py), so its token itself always fits: the cut takes drafts only
        num_new = min(1 + drafts, budget, self.max_model_len - 1 - computed)
        return num_new, min(computed + num_new + self.lookahead, self.max_model_len)

    def verified(self, request: Request, num_drafts: int) -> tuple[int, int]:
        """After a step that verified num_drafts drafts of the request: take the rejected ones back off its computed
        tokens, count them, and return (the tokens it gains: accepted + 1, at most what its reply has left; the
        drafts accepted)."""
        accepted = self.draws(request).accepted_at(request.num_output_tokens, num_drafts)
        request.num_computed_tokens -= num_drafts - accepted
        c = self.counts
        c.num_drafts += 1
        c.num_draft_tokens += num_drafts
        c.num_accepted_tokens += accepted
        for i in range(accepted):
            c.accepted_per_pos[i] += 1
        return min(accepted + 1, request.max_output_tokens - request.num_output_tokens), accepted

    def reserve(self, request: Request, num_new: int, num_hit_blocks: int) -> int:
        """The slots an admitted request's allocation holds: its first chunk and the lookahead beyond it."""
        if not self.lookahead:
            return 0
        tokens = request.num_computed_tokens + num_hit_blocks * self.block_size + num_new + self.lookahead
        return min(tokens, self.max_model_len)
