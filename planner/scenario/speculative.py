"""`engine.speculative` (vLLM's --speculative-config): its per-position acceptance rates, read as a list, and the
rules that involve the target model, the drafter and the engine (`check_speculative`, from check_relations)."""

from __future__ import annotations

import math
from typing import Any

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.rules import Ctx
from sim.acceptance import resolve
from sim.config import Scenario
from sim.draft_model import MODEL_METHODS

KEY = "engine.speculative"
RATES_HELP = (
    "a list of acceptance rates in [0, 1], one per speculative token, non-increasing (position i: the share of"
    " drafts whose first i + 1 tokens are all accepted)"
)


def read_rates(value: Any, key_path: str, ctx: Ctx) -> tuple[float, ...]:
    """synthetic_acceptance_rates: a non-empty list of numbers in [0, 1], non-increasing."""
    if not isinstance(value, list) or not value:
        raise ScenarioError(ctx.file, key_path, value, f"expected {RATES_HELP}")
    for i, rate in enumerate(value):
        where = f"{key_path}[{i}]"
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate):
            raise ScenarioError(ctx.file, where, rate, f"expected a number; {key_path} is {RATES_HELP}")
        if not 0 <= rate <= 1:
            raise ScenarioError(ctx.file, where, rate, "must be in [0, 1] (an acceptance rate)")
        if i and rate > value[i - 1]:
            raise ScenarioError(
                ctx.file, where, rate,
                f"must be <= the rate before it ({value[i - 1]}): a draft token is accepted only after every earlier"
                " one was, so the rates never increase",
            )  # fmt: skip
    return tuple(float(rate) for rate in value)


def check_speculative(s: Scenario, ctx: Ctx) -> None:
    """The speculative config against the target, the drafter and the engine: one message per mistake."""
    spec = s.engine.speculative
    if spec is None:
        return

    def fail(key: str, value: Any, allowed: str) -> None:
        raise ScenarioError(ctx.file, f"{KEY}.{key}" if key else KEY, value, allowed)

    m, k = s.model, spec.num_speculative_tokens
    if s.engine.scheduler != "continuous":
        fail("", NO_VALUE, "needs engine.scheduler continuous (the static baseline does not speculate)")
    if spec.method in ("eagle", "eagle3", "draft_model") and spec.model is None:
        fail(
            "model",
            NO_VALUE,
            f"missing; method {spec.method} needs the drafter's model (catalog name, path or mapping)",
        )
    if spec.method in ("ngram", "mtp") and spec.model is not None:
        what = "looks its drafts up in the context" if spec.method == "ngram" else "drafts with the target's own layers"
        fail("model", spec.model.name, f"not used: method {spec.method} {what}; leave model out")
    if spec.method == "mtp" and not m.num_nextn_predict_layers:
        fail(
            "method", "mtp",
            f"{m.name} has no multi-token-prediction layers (num_nextn_predict_layers 0 in its config); MTP serves"
            " models that ship them (DeepSeek-V3/R1, Qwen3-Next...); allowed for it: ngram, eagle, eagle3, draft_model",
        )  # fmt: skip
    if spec.method != "ngram":
        for name in ("prompt_lookup_max", "prompt_lookup_min"):
            if getattr(spec, name) is not None:
                fail(name, getattr(spec, name), "only method ngram looks n-grams up; leave it out")
    elif (spec.prompt_lookup_min or 1) > (spec.prompt_lookup_max or 5):
        fail(
            "prompt_lookup_min", spec.prompt_lookup_min, f"must be <= prompt_lookup_max ({spec.prompt_lookup_max or 5})"
        )
    draft = spec.model
    if draft is not None:
        if draft.vocab_size != m.vocab_size:
            fail(
                "model", draft.name,
                f"its vocabulary has {draft.vocab_size:,} tokens, the target's ({m.name}) {m.vocab_size:,}: a drafter"
                " proposes the target's token ids, so the vocabularies must be the same (an EAGLE-3 head's smaller"
                " LM head is its draft_vocab_size)",
            )  # fmt: skip
        if draft.hidden_size != m.hidden_size and spec.method in ("eagle", "eagle3"):
            fail(
                "model", draft.name,
                f"hidden_size {draft.hidden_size} differs from the target's ({m.hidden_size}): an EAGLE head reads the"
                " target's hidden states",
            )  # fmt: skip
        if spec.method != "eagle3" and draft.draft_vocab_size:
            fail(
                "model",
                draft.name,
                f"has a draft_vocab_size ({draft.draft_vocab_size}): an EAGLE-3 head; use method eagle3",
            )
    tp = s.hardware.tensor_parallel_size
    if spec.draft_tensor_parallel_size not in (None, tp):
        fail(
            "draft_tensor_parallel_size", spec.draft_tensor_parallel_size,
            f"the planner prices the drafter sharded as the target: leave it out or give {tp}",
        )  # fmt: skip
    if spec.synthetic_acceptance_rates is not None:
        if spec.synthetic_acceptance_length is not None:
            fail(
                "synthetic_acceptance_length",
                spec.synthetic_acceptance_length,
                "give the rates or the length, not both",
            )
        if len(spec.synthetic_acceptance_rates) != k:
            fail(
                "synthetic_acceptance_rates", list(spec.synthetic_acceptance_rates),
                f"needs one rate per speculative token: {k} (num_speculative_tokens)",
            )  # fmt: skip
    if spec.synthetic_acceptance_length is not None and not 1 <= spec.synthetic_acceptance_length <= k + 1:
        fail(
            "synthetic_acceptance_length", spec.synthetic_acceptance_length,
            f"must be in [1, {k + 1}] (1 + the accepted drafts, of num_speculative_tokens {k})",
        )  # fmt: skip
    if spec.draft_rate != 1 and spec.method in MODEL_METHODS:
        fail(
            "draft_rate", spec.draft_rate, "a drafter model drafts at every step; only method ngram misses (allowed: 1)"
        )
    try:
        resolve(spec, m)
    except ValueError as e:
        fail("", NO_VALUE, str(e))
