"""The live engine's tests share: tiny random models (transformers' and ours), prompts, transformers' greedy
generate() as the oracle, a stand-in scheduler loop (`serve`), and the Triton call counter. Needs torch; a test
module imports it after `pytest.importorskip("torch")`.

transformers is imported when a test asks for it (`transformers()`), not here: a transformers release that
cannot be imported with our packages is one failure (tests/test_packaging.py imports every dependency) and a
skip naming it in each test that needs it, not a collection error in every engine module."""

from __future__ import annotations

import collections
import dataclasses
import importlib
import os
from math import ceil

import pytest
import torch

import gpu_engine.attention
from gpu_engine.runner import ModelRunner
from planner.catalog import model_spec_from_hf_config
from sim.config import ModelSpec
from sim.request import Request, Status

# A tiny Llama-style config (transformers' keys).
TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}
# A larger init than HF's 0.02, so the context (and a wrong slot) changes the argmax: for token-level parity.
SHARP = {"initializer_range": 0.2}
# The same shape as our ModelSpec, without transformers.
LLAMA = ModelSpec(
    name="tiny-llama",
    model_type="llama",
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=512,
    max_position_embeddings=256,
)
# Qwen-7B's layout at tiny size: no GQA, bias on c_attn, untied lm_head
QWEN = dataclasses.replace(LLAMA, name="tiny-qwen", model_type="qwen", num_key_value_heads=4, attention_bias=True)


def load_one_layer(path) -> None:
    """load_weights into LLAMA cut to one layer (what the checkpoint error tests need)."""
    from gpu_engine.model import build_model
    from gpu_engine.weights import load_weights

    load_weights(build_model(dataclasses.replace(LLAMA, num_hidden_layers=1), torch.float32, "cpu"), path)


BLOCK_SIZE = 4
PROMPT_LENGTHS = [5, 13, 1, 22]
MAX_NEW_TOKENS = 9
HF_CLASSES = {  # model_type -> transformers' (config class, model class), by name
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
}


def transformers(module_level: bool = False):
    """The transformers module; a skip that says why when it is missing or cannot be imported (module_level: of
    the whole module, called before its imports)."""
    try:
        return importlib.import_module("transformers")
    except ModuleNotFoundError:
        pytest.skip("transformers is not installed (the engine extra)", allow_module_level=module_level)
    except ImportError as err:  # installed, broken: test_packaging's import test fails on it, saying so
        pytest.skip(
            f"transformers cannot be imported ({err}); tests/test_packaging.py fails on it",
            allow_module_level=module_level,
        )


def hf_classes(model_type: str):
    """transformers' (config class, model class) for a model_type."""
    module = transformers()
    return tuple(getattr(module, name) for name in HF_CLASSES[model_type])


def tiny_hf(model_type: str, path, seed: int = 0, **overrides):
    """A random tiny HF model saved as safetensors in path; returns (hf_model, its ModelSpec)."""
    config_cls, model_cls = hf_classes(model_type)
    config = config_cls(**TINY | overrides)
    torch.manual_seed(seed)
    hf = model_cls(config).eval()
    hf.save_pretrained(path)
    return hf, model_spec_from_hf_config(config.to_dict(), f"tiny-{model_type}")


def sharp_tiny_hf(model_type: str, path, **overrides):
    """tiny_hf with SHARP's init: greedy tokens that depend on the whole context."""
    return tiny_hf(model_type, path, **(SHARP | overrides))


def prompts(vocab_size: int, lengths: list[int] = PROMPT_LENGTHS, seed: int = 7) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (n,), generator=g).tolist() for n in lengths]


def hf_greedy(hf, prompt: list[int], max_new_tokens: int = MAX_NEW_TOKENS) -> list[int]:
    out = hf.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=None,  # forced output length, as the engine (EOS ignored)
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


def serve(runner: ModelRunner, prompts: list[list[int]], chunk: int, preempt: tuple[int, int] | None = None):
    """A stand-in scheduler (a free list of block ids, a fixed chunk size) that mutates the requests exactly as
    the real scheduler's update does, which the runner never does itself. Request i joins at step i; prefill
    in chunks of `chunk`; preempt=(request_id, step) evicts one. Returns each request's output tokens."""
    requests = [Request(i, 0.0, len(p), MAX_NEW_TOKENS, prompt_token_ids=p) for i, p in enumerate(prompts)]
    free = list(range(runner.num_blocks))
    step = 0
    while not all(r.is_finished for r in requests):
        running = [r for r in requests[: step + 1] if not r.is_finished]
        if preempt is not None and step == preempt[1]:
            victim = requests[preempt[0]]
            assert 0 < victim.num_output_tokens < MAX_NEW_TOKENS, "preempt while it decodes"
            free[:0] = victim.block_ids  # reused first: other requests overwrite its old slots
            victim.block_ids, victim.num_computed_tokens = [], 0
            running.remove(victim)  # back to waiting for this step
        scheduled = []
        for r in running:
            n = min(chunk, r.num_tokens - r.num_computed_tokens)
            r.block_ids += [
                free.pop(0) for _ in range(ceil((r.num_computed_tokens + n) / BLOCK_SIZE) - len(r.block_ids))
            ]
            scheduled.append((r, n))
        sampled = runner.execute(scheduled)
        assert sampled.keys() == {r.request_id for r, n in scheduled if r.num_computed_tokens + n == r.num_tokens}
        for r, n in scheduled:
            r.num_computed_tokens += n
            if r.request_id in sampled:
                r.output_token_ids.append(sampled[r.request_id])
                r.num_output_tokens += 1
            if r.num_output_tokens == MAX_NEW_TOKENS:
                r.status = Status.FINISHED
                free[:0] = r.block_ids
        step += 1
    return [r.output_token_ids for r in requests]


def count_triton_calls(monkeypatch) -> tuple[str, collections.Counter]:
    """Route every kernel of the forward through Triton and count the calls. With a CUDA device the runner
    runs there (the real path); without one, on CPU tensors through Triton's interpreter, so the kernels'
    wiring into the engine is checked on any machine. Returns (device, call counts)."""
    pytest.importorskip("triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("without CUDA the Triton path needs TRITON_INTERPRET=1 (tests/conftest.py sets it)")
    ops = gpu_engine.attention.triton_ops()
    calls = collections.Counter()

    def counted(name):
        def call(*args, **kwargs):
            calls[name] += 1
            return getattr(ops, name)(*args, **kwargs)

        return call

    kernels = [f.name for f in dataclasses.fields(ops) if f.name != "unchecked"]
    counted_ops = gpu_engine.attention.KernelOps(**{name: counted(name) for name in kernels})  # every layer checks
    monkeypatch.setattr(gpu_engine.attention, "_triton_ops", lambda device_type: counted_ops)
    return device, calls


def tier_copies(kv) -> tuple:
    """A live engine's tier copies (gpu_engine.host_copies.HostCopies) on `kv` (a KVCacheManager of 8 blocks of 16
    tokens with its tiers), a CPU cache of 3 layers of random K and V, and the requests its loads made schedulable:
    (copies, caches, added)."""
    from types import SimpleNamespace

    from gpu_engine.host_copies import HostCopies

    caches = [(torch.randn(8, 16, 2, 4), torch.randn(8, 16, 2, 4)) for _ in range(3)]
    runner = SimpleNamespace(device=torch.device("cpu"), kv_caches=caches)
    added: list[Request] = []
    return HostCopies(SimpleNamespace(kv=kv, on_host_load=None, add_request=added.append), runner), caches, added
