"""The engine limits `vllm serve` picks when the user leaves them unset, which depend on the GPU.

Follows vLLM's `EngineArgs.get_batch_defaults` and `EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`
(vllm/engine/arg_utils.py, v0.11 to current main), for the OPENAI_API_SERVER usage context (`vllm serve`):

- a GPU with at least 70 GiB of memory that is not an A100 (H100, H200, MI300X): 8192 tokens, 1024 sequences
  (A100s are excluded on purpose: the larger budget lowered their throughput, vLLM PR #17885);
- any other GPU: 2048 tokens, 256 sequences;
- vLLM's CPU backend: 2048 x world size tokens, 128 x world size sequences.

Then, only for the values the user left unset: without chunked prefill the budget is at least
max_model_len (a whole prompt must fit a step); the budget is at most max_num_seqs x max_model_len; and
max_num_seqs is at most the budget.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.config import GpuSpec

GIB = 1 << 30
LARGE_GPU_BYTES = 70 * GIB  # get_batch_defaults: device_memory >= 70 GiB
CPU_DEVICE_NAME = "cpu"  # the catalog's entry for runs on this machine's CPU (vLLM's CPU platform)


class BatchLimits(NamedTuple):
    max_num_batched_tokens: int
    max_num_seqs: int


def serve_batch_defaults(gpu: GpuSpec, world_size: int = 1) -> BatchLimits:
    """`get_batch_defaults(world_size)[...][UsageContext.OPENAI_API_SERVER]` on this device."""
    if gpu.name == CPU_DEVICE_NAME:
        return BatchLimits(2048 * world_size, 128 * world_size)
    if gpu.memory_bytes >= LARGE_GPU_BYTES and "a100" not in gpu.name.lower():
        return BatchLimits(8192, 1024)
    return BatchLimits(2048, 256)


def resolve_batch_limits(
    gpu: GpuSpec,
    world_size: int,
    max_model_len: int,
    enable_chunked_prefill: bool,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
) -> BatchLimits:
    """The limits vLLM runs with: the user's values where given (None: unset), the device's defaults otherwise."""
    defaults = serve_batch_defaults(gpu, world_size)
    tokens = defaults.max_num_batched_tokens if max_num_batched_tokens is None else max_num_batched_tokens
    seqs = defaults.max_num_seqs if max_num_seqs is None else max_num_seqs
    if max_num_batched_tokens is None:
        if not enable_chunked_prefill:
            tokens = max(max_model_len, tokens)
        tokens = min(seqs * max_model_len, tokens)
    if max_num_seqs is None:
        seqs = min(seqs, tokens)
    return BatchLimits(tokens, seqs)
