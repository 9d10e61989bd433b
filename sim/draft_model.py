"""What a speculative engine's drafter is: its architecture as a ModelSpec, what it shares with the target, and the
projection that feeds it the target's hidden states. sim/engine_facts.py derives the drafter's own EngineFacts
from these (`EngineFacts.derive` of the draft's spec on the same GPUs), the memory model takes its stored weights
and KV out of the pool, and sim/draft_cost.py prices its passes.

Per method, as vLLM loads them (vllm/v1/spec_decode/eagle.py `load_model`, vllm/model_executor/models/
llama_eagle*.py, deepseek_mtp.py):
- draft_model: a whole smaller model of the same vocabulary, its own embeddings and LM head.
- eagle: a head of one or more decoder layers (its config.json) over fc([embedding; hidden state]), 2h -> h;
  the embedding and the LM head are the target's, shared.
- eagle3: the same, fed the concatenation of three of the target's layers' hidden states through fc, 3h -> h, in
  its first pass; its layer's qkv takes [embedding; hidden] (2h wide, h more than a plain layer), and its LM head
  is its own, over draft_vocab_size tokens (mapped onto the target's vocabulary). The embedding is the target's.
- mtp: the target's own num_nextn_predict_layers modules, each a decoder layer of the target's last kind (MoE for
  DeepSeek-V3) over eh_proj([norm(embedding); norm(hidden)]), 2h -> h; the embedding and the LM head are shared.
- ngram: no model.
"""

from __future__ import annotations

import dataclasses

from sim.config import ModelSpec, SpeculativeConfig

MODEL_METHODS = ("eagle", "eagle3", "mtp", "draft_model")  # the methods whose drafter is a model
EAGLE_METHODS = ("eagle", "eagle3", "mtp")  # vLLM's use_eagle(): a head over the target's hidden states


def draft_spec(target: ModelSpec, spec: SpeculativeConfig) -> ModelSpec | None:
    """The drafter's architecture, as priced and sized: None for ngram. An EAGLE-3 head's LM head is over its
    draft vocabulary; an MTP drafter is the target's layers of its last kind, num_nextn_predict_layers of them."""
    if spec.method == "ngram":
        return None
    if spec.method == "mtp":
        return dataclasses.replace(
            target,
            name=f"{target.name} MTP",
            num_hidden_layers=target.num_nextn_predict_layers,
            dense_layers=(),  # DeepSeek-V3's MTP layer is a MoE layer, as its last layers are
            sliding_layers=(),
            num_nextn_predict_layers=0,
            published_params=None,
        )
    head = spec.model
    if spec.method == "eagle3" and head.draft_vocab_size:
        return dataclasses.replace(head, vocab_size=head.draft_vocab_size, draft_vocab_size=0)
    return head


def shared_params(spec: SpeculativeConfig, draft: ModelSpec) -> int:
    """Parameters the drafter's spec counts that are the target's own tensors, shared by vLLM and stored once:
    the embedding for every head, and the LM head too for eagle (none of its own) and mtp."""
    if spec.method == "draft_model":
        return 0
    embedding = draft.embedding_params
    lm_head = 0 if draft.tie_word_embeddings else draft.embedding_params
    if spec.method == "eagle3":
        return embedding if not draft.tie_word_embeddings else 0  # its LM head (draft vocabulary) is its own
    return embedding + lm_head


def fusion_params(spec: SpeculativeConfig, target: ModelSpec) -> tuple[int, int]:
    """(parameters every pass goes through, parameters the first pass adds) of the projection that feeds the
    drafter the target's hidden states, beyond its spec's layers."""
    h = target.hidden_size
    if spec.method == "eagle":
        return 2 * h * h, 0
    if spec.method == "eagle3":
        return h * (target.q_size + 2 * target.kv_size), 3 * h * h
    if spec.method == "mtp":
        return 2 * h * h * target.num_nextn_predict_layers, 0
    return 0, 0


def drafts_with_lookahead(spec: SpeculativeConfig) -> int:
    """vLLM's num_lookahead_tokens (vllm/v1/core/sched/scheduler.py): the slots beyond a step's tokens that the
    scheduler allocates for the drafter to write its drafts' KV: k for the model-based methods, 0 for ngram."""
    return spec.num_speculative_tokens if spec.method in MODEL_METHODS else 0
