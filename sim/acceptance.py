"""How many drafted tokens the target accepts: per-position rates, their published defaults, and each request's
seeded draws.

Acceptance is a property of the model pair and the data, not of the hardware, so a scenario states it and both
executors force it, as they force output lengths. vLLM's synthetic rejection sampler (`rejection_sample_method:
synthetic`, a testing tool of vllm/config/speculative.py) takes a mean acceptance length, `synthetic_acceptance_length`
(1 + accepted per draft); here it is spent on the earliest positions first (length 3.78 over 7 drafts accepts 2 always
and a third with probability 0.78), the schedule of least variance. The planner's own `synthetic_acceptance_rates`
gives the rates per position i, the share of drafts whose first i + 1 tokens are all accepted (non-increasing: a draft
token counts only after every earlier one was accepted), what `vllm:spec_decode_num_accepted_tokens_per_pos` over
`vllm:spec_decode_num_drafts` reports.

A draft's accepted count is drawn from the request's own stream, a child of the workload's seed
(`SeedSequence(seed, spawn_key=(ACCEPTANCE_STREAM, request))`, beside the workload's five streams, none of which it
moves), once per output position a decode step can start from: one uniform u, and the first i + 1 drafts are
accepted while u < rate[i] (a second uniform says whether an n-gram lookup found a draft at all). The same request
therefore accepts the same counts in the simulator and in the live engine, whatever else happens in between. A step
that verifies fewer drafts (the token budget cut them) accepts the same draw's count, cut to them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config import ModelSpec, SpeculativeConfig

ACCEPTANCE_STREAM = 5  # the workload's streams are 0..4 (sim/workload_draws.py): the next child of the same seed


@dataclass(frozen=True)
class PublishedAcceptance:
    """Per-position acceptance rates measured for one method on one model family, with where they come from."""

    rates: tuple[float, ...]  # positions 1..len: no default beyond them
    draft_rate: float  # share of decode steps that carried drafts
    source: str


# (method, family) -> what vLLM's own benchmarks measured, greedy sampling. A family is a model_type and the
# vocabulary that ties a draft to its target (sim.acceptance.family). The rates beyond the published positions
# have no default: a scenario asking for more speculative tokens states its own acceptance.
PUBLISHED = {
    # EAGLE-3 (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) on Llama-3.1-8B-Instruct, MT-bench, vLLM V1: mean acceptance
    # length 2.36, 2.79, 3.08, 3.32, 3.46, 3.54 at k = 2..7 (vllm-project/vllm#20780). A chain's drafts do not depend
    # on k, so position i's rate is AL(i) - AL(i - 1) for i >= 3; positions 1 and 2 (summing to 1.36) are split as a
    # geometric sequence with position 3 (r2^2 = r1 x r3).
    ("eagle3", "llama-128256"): PublishedAcceptance(
        (0.78, 0.58, 0.43, 0.29, 0.24, 0.14, 0.08),
        1.0,
        "EAGLE-3 on Llama-3.1-8B-Instruct, MT-bench, greedy (vLLM V1: vllm-project/vllm#20780)",
    ),
    # EAGLE-1 (yuhuili/EAGLE-LLaMA3.1-Instruct-8B), same runs: AL 2.10, 2.29, 2.39, 2.43, 2.45, 2.47 at k = 2..7.
    ("eagle", "llama-128256"): PublishedAcceptance(
        (0.73, 0.37, 0.19, 0.10, 0.04, 0.02, 0.02),
        1.0,
        "EAGLE on Llama-3.1-8B-Instruct, MT-bench, greedy (vLLM V1: vllm-project/vllm#20780)",
    ),
    # DeepSeek-R1's MTP module at k = 1: "the acceptance rate is 81% ~ 82.3%" (vllm-project/vllm#12755); vLLM's
    # recipes run k = 1 on Hopper. R1 and V3 share the architecture and the MTP module's training.
    ("mtp", "deepseek_v3-129280"): PublishedAcceptance(
        (0.81,), 1.0, "DeepSeek-R1 MTP, k = 1 (vLLM: vllm-project/vllm#12755)"
    ),
    # n-gram (prompt_lookup_min 2, max 5, k = 5) on Llama-3.1-8B-Instruct, an editing dataset (vdaita/edit_5k_char,
    # 2,048 output tokens): 993 drafts and 821 tokens produced without one (vllm-project/vllm#24344). Editing repeats
    # its prompt: chat data matches far less often; state yours.
    ("ngram", "*"): PublishedAcceptance(
        (0.81, 0.74, 0.70, 0.68, 0.66),
        993 / (993 + 821),
        "n-gram on Llama-3.1-8B-Instruct, a text-editing dataset (vLLM V1: vllm-project/vllm#24344); chat matches"
        " far less often",
    ),
}


def family(model: ModelSpec) -> str:
    """The family the published defaults are keyed by: the architecture and the vocabulary."""
    return f"{model.model_type}-{model.vocab_size}"


def rates_from_length(length: float, num_tokens: int) -> tuple[float, ...]:
    """vLLM's synthetic_acceptance_length as per-position rates: the mean length - 1 accepted tokens, spent on the
    earliest positions first (1, 1, ..., the fraction, 0, ...)."""
    accepted = length - 1
    return tuple(round(min(1.0, max(0.0, accepted - i)), 12) for i in range(num_tokens))


def published(method: str, target: ModelSpec) -> PublishedAcceptance | None:
    return PUBLISHED.get((method, family(target))) or PUBLISHED.get((method, "*"))


def resolve(spec: SpeculativeConfig, target: ModelSpec) -> tuple[tuple[float, ...], float, str]:
    """(rates, draft_rate, where they come from) for spec on target: the scenario's rates or length, else the
    published default. ValueError (the message's end) when there is none for every position asked for."""
    k = spec.num_speculative_tokens
    if spec.synthetic_acceptance_rates is not None:
        return tuple(spec.synthetic_acceptance_rates), spec.draft_rate, "synthetic_acceptance_rates (the scenario's)"
    if spec.synthetic_acceptance_length is not None:
        rates = rates_from_length(spec.synthetic_acceptance_length, k)
        return rates, spec.draft_rate, "synthetic_acceptance_length (the scenario's), earliest positions first"
    default = published(spec.method, target)
    if default is None:
        raise ValueError(
            f"no published acceptance for method {spec.method} on {target.name} (family {family(target)}): give"
            " engine.speculative.synthetic_acceptance_rates (one rate per speculative token) or"
            " synthetic_acceptance_length"
        )
    if len(default.rates) < k:
        raise ValueError(
            f"the published acceptance for method {spec.method} on {target.name} covers {len(default.rates)}"
            f" position(s) ({default.source}), not {k}: give engine.speculative.synthetic_acceptance_rates (one rate"
            " per speculative token) or synthetic_acceptance_length, or lower num_speculative_tokens"
        )
    return default.rates[:k], default.draft_rate, f"published default: {default.source}"


class AcceptanceDraws:
    """One request's drafts and accepted counts, drawn from its own stream once, indexed by the output position a
    decode step starts from (`num_output_tokens` when it is scheduled): a step sampling several tokens skips the
    positions it covered, and a preempted request drawing again at a position gets the same answer. Both are
    functions of the request and its position only, so the simulator and the live engine agree whatever else
    differs between them."""

    __slots__ = ("accepted", "drafts")

    def __init__(self, seed: int, request_index: int, rates: np.ndarray, draft_rate: float, num_positions: int) -> None:
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(ACCEPTANCE_STREAM, request_index)))
        u = rng.random((num_positions, 2))
        # rates are non-increasing, so u < rate[i] for exactly the first `accepted` positions
        self.accepted = (u[:, 0, None] < rates).sum(axis=1).tolist()
        self.drafts = (u[:, 1] < draft_rate).tolist() if draft_rate < 1 else None  # None: every step drafts

    def drafts_at(self, position: int) -> bool:
        """Whether the decode step starting at output position `position` carries drafts."""
        return self.drafts is None or self.drafts[position]

    def accepted_at(self, position: int, num_drafts: int) -> int:
        """How many of the step's num_drafts drafts the target accepts (the draw's count, cut to them)."""
        accepted = self.accepted[position]
        return min(num_drafts, accepted)
