"""The static-batching baseline for `python -m gpu_engine.bench`: transformers' `generate` over consecutive
batches of the same requests the engine serves, left-padded, each run to its batch's longest reply (EOS
cannot end it), with only each request's own reply counted. Weights are random: values do not change
timings."""

from __future__ import annotations

import time

import torch
import transformers

from gpu_engine.engine import EngineError
from gpu_engine.runner import torch_dtype
from sim.config import ModelSpec
from sim.workload import Workload, prompt_token_ids


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def hf_config(spec: ModelSpec) -> transformers.PretrainedConfig:
    """transformers' config for the architecture; checked before the engine runs, so a model without a
    built-in transformers class (Qwen-7B's remote code) fails at once."""
    try:
        return transformers.AutoConfig.for_model(
            spec.model_type, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
            num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
            num_key_value_heads=spec.num_key_value_heads, head_dim=spec.head_dim, vocab_size=spec.vocab_size,
            max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=spec.tie_word_embeddings,
            attention_bias=spec.attention_bias, rope_theta=spec.rope_theta, rms_norm_eps=spec.rms_norm_eps,
            rope_scaling=spec.rope_scaling,
        )  # fmt: skip
    except ValueError as err:
        raise EngineError(
            f"{spec.name}: transformers has no built-in class for model_type "
            f"{spec.model_type!r}, the static baseline needs one"
        ) from err


def hf_model(config: transformers.PretrainedConfig, dtype: str, device: torch.device) -> transformers.PreTrainedModel:
    """Randomly initialised on the device (values do not change timings), with SDPA attention."""
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=torch_dtype(dtype), attn_implementation="sdpa"
        )
    return model.eval()


def left_padded(prompts: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), each [batch, longest prompt], padded on the left as generate expects."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


def generate_s(
    model: transformers.PreTrainedModel, prompts: list[list[int]], num_new_tokens: int, device: torch.device
) -> float:
    """Wall time of one static batch: greedy, exactly num_new_tokens for every row (EOS cannot end it)."""
    ids, mask = left_padded(prompts, device)
    synchronize(device)
    start = time.perf_counter()
    model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        min_new_tokens=num_new_tokens,
        max_new_tokens=num_new_tokens,
        pad_token_id=0,
    )
    synchronize(device)
    return time.perf_counter() - start


@torch.inference_mode()
def static_run(
    config: transformers.PretrainedConfig, dtype: str, device: torch.device, workload: Workload, batch_size: int
) -> dict:
    """transformers' generate over consecutive batches of the workload (arrival order), each run to its
    longest reply; throughput counts each request's own output only."""
    model = hf_model(config, dtype, device)
    prompts = [prompt_token_ids(workload, i) for i in range(len(workload))]
    generate_s(model, prompts[:batch_size], 2, device)  # warm-up: kernels, cuBLAS handles, allocator
    elapsed_s = 0.0
    for start in range(0, len(workload), batch_size):
        outputs = workload.output_tokens[start : start + batch_size]
        elapsed_s += generate_s(model, prompts[start : start + batch_size], int(outputs.max()), device)
    return {
        "elapsed_s": elapsed_s,
        "output_tokens_per_s": int(workload.output_tokens.sum()) / elapsed_s,
        "batch_size": batch_size,
    }
