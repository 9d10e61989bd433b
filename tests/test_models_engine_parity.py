"""The live engine's mixture-of-experts layer (torch path, CPU): greedy tokens of tiny random Qwen3-MoE and
Mixtral models, loaded from their HF checkpoints, equal transformers' generate() of each prompt alone, under
chunked prefill, staggered arrivals and a preemption (tests/helpers/engine.py's `serve`)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from helpers.engine import BLOCK_SIZE, count_triton_calls, hf_classes, hf_greedy, prompts, serve
from helpers.scenarios import make_scenario

from gpu_engine.runner import ModelRunner
from planner.catalog import model_spec_from_hf_config
from sim.engine_facts import EngineFacts

TINY_MOE = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 512, "max_position_embeddings": 256, "initializer_range": 0.2, "num_experts_per_tok": 2,
}  # fmt: skip
CASES = {  # name -> (model_type, config overrides)
    # norm_topk_prob false: transformers' default for Qwen3-MoE (the top-k weights are not renormalised);
    # decoder_sparse_step 2: layer 0 is a dense MLP, layer 1 has experts
    "qwen3_moe": (
        "qwen3_moe",
        {
            "head_dim": 16,
            "intermediate_size": 96,
            "moe_intermediate_size": 32,
            "num_experts": 8,
            "decoder_sparse_step": 2,
            "norm_topk_prob": False,
        },
    ),
    "qwen3_moe-renormalised": (
        "qwen3_moe",
        {
            "head_dim": 16,
            "intermediate_size": 96,
            "moe_intermediate_size": 32,
            "num_experts": 8,
            "norm_topk_prob": True,
        },
    ),
    "mixtral": (
        "mixtral",
        {"intermediate_size": 32, "num_local_experts": 4, "sliding_window": None},
    ),
}


def _case(cases: dict, name: str):
    """(config class, model class, overrides) of a case: transformers' classes looked up when a test runs."""
    model_type, overrides = cases[name]
    return (*hf_classes(model_type), overrides)


@pytest.mark.parametrize("case", CASES)
def test_moe_greedy_tokens_equal_transformers_generate(case, tmp_path):
    config_cls, model_cls, overrides = _case(CASES, case)
    config = config_cls(**TINY_MOE | overrides)
    torch.manual_seed(0)
    hf = model_cls(config).eval()
    hf.save_pretrained(tmp_path)
    spec = model_spec_from_hf_config(config.to_dict(), f"tiny-{case}")
    assert spec.is_moe and spec.live_engine_unsupported() == []
    if case == "qwen3_moe":
        assert spec.dense_layers == (0,) and not spec.norm_topk_prob
    runner = ModelRunner(spec, "float32", "cpu", num_blocks=40, block_size=BLOCK_SIZE, weights_path=str(tmp_path))
    batch_prompts = prompts(spec.vocab_size)
    expected = [hf_greedy(hf, p) for p in batch_prompts]
    assert len({t for out in expected for t in out}) > 8  # not a model that repeats one token
    assert serve(runner, batch_prompts, chunk=6) == expected
    assert serve(runner, batch_prompts, chunk=6, preempt=(1, 5)) == expected


def test_routing_sends_tokens_to_different_experts(tmp_path):
    """The tiny model really routes: its tokens' top-k sets differ (else parity would not test routing)."""
    config_cls, model_cls, overrides = _case(CASES, "mixtral")
    config = config_cls(**TINY_MOE | overrides)
    torch.manual_seed(0)
    hf = model_cls(config).eval()
    x = hf.model.embed_tokens(torch.arange(40))
    logits = torch.nn.functional.linear(x, hf.model.layers[0].mlp.gate.weight)
    assert len(torch.topk(logits, 2, dim=-1).indices.unique()) == 4


SLIDING = {
    # a 4-token window, shorter than most prompts: the mask matters from the fifth token on
    "mistral-window": (
        "mistral",
        {"intermediate_size": 96, "sliding_window": 4},
    ),
    "mixtral-window": (
        "mixtral",
        {"intermediate_size": 32, "num_local_experts": 4, "sliding_window": 4},
    ),
}


@pytest.mark.parametrize("case", SLIDING)
def test_sliding_window_greedy_tokens_equal_transformers_generate(case, tmp_path):
    config_cls, model_cls, overrides = _case(SLIDING, case)
    config = config_cls(**TINY_MOE | overrides)
    torch.manual_seed(0)
    hf = model_cls(config).eval()
    hf.save_pretrained(tmp_path)
    spec = model_spec_from_hf_config(config.to_dict(), f"tiny-{case}")
    assert spec.sliding_window == 4 and spec.num_sliding_layers == spec.num_hidden_layers
    runner = ModelRunner(spec, "float32", "cpu", num_blocks=40, block_size=BLOCK_SIZE, weights_path=str(tmp_path))
    batch_prompts = prompts(spec.vocab_size)
    expected = [hf_greedy(hf, p) for p in batch_prompts]
    assert serve(runner, batch_prompts, chunk=6) == expected
    assert serve(runner, batch_prompts, chunk=6, preempt=(1, 5)) == expected
    # the window changes the tokens: the same weights without it generate something else
    unwindowed = dataclasses.replace(spec, sliding_window=None, sliding_layers=())
    full = ModelRunner(unwindowed, "float32", "cpu", num_blocks=40, block_size=BLOCK_SIZE, weights_path=str(tmp_path))
    assert serve(full, batch_prompts, chunk=6) != expected


def test_moe_on_the_triton_kernels(tmp_path, monkeypatch):
    """The MoE layer between the Triton kernels (on CUDA, or Triton's interpreter on CPU): the same tokens."""
    device, calls = count_triton_calls(monkeypatch)
    config_cls, model_cls, overrides = _case(CASES, "mixtral")
    config = config_cls(**TINY_MOE | overrides)
    torch.manual_seed(0)
    hf = model_cls(config).eval()
    hf.save_pretrained(tmp_path)
    spec = model_spec_from_hf_config(config.to_dict(), "tiny-mixtral")
    runner = ModelRunner(spec, "float32", device, num_blocks=40, block_size=BLOCK_SIZE, weights_path=str(tmp_path))
    batch_prompts = prompts(spec.vocab_size)[:2]
    assert serve(runner, batch_prompts, chunk=6) == [hf_greedy(hf, p) for p in batch_prompts]
    assert calls["paged_attention"] > 0 and calls["silu_and_mul"] > calls["paged_attention"]  # one per expert hit


@pytest.mark.parametrize(
    ("model", "device", "message"),
    [
        ("deepseek-v3", "cpu", "does not implement mixture of experts of model_type deepseek_v3, multi-head latent"),
        ("gpt-oss-20b", "cpu", "mxfp4 quantised weights"),
        ("gemma-3-27b", "cpu", "model_type gemma3_text"),
    ],
)
def test_live_engine_refuses_models_it_does_not_implement(model, device, message):
    from gpu_engine.engine import EngineError, run_scenario

    scenario = make_scenario(model=model, hardware={"gpu": "h200"})
    with pytest.raises(EngineError, match=message):
        run_scenario(scenario, device=device)


def _sliding_model(tmp_path, case: str = "mistral-window"):
    config_cls, model_cls, overrides = _case(SLIDING, case)
    config = config_cls(**TINY_MOE | overrides)
    torch.manual_seed(0)
    hf = model_cls(config).eval()
    hf.save_pretrained(tmp_path)
    return hf, model_spec_from_hf_config(config.to_dict(), f"tiny-{case}")


def test_sliding_window_on_the_triton_kernels(tmp_path, monkeypatch):
    """The windowed paged-attention kernel (on CUDA, or Triton's interpreter on CPU): the same tokens."""
    device, calls = count_triton_calls(monkeypatch)
    hf, spec = _sliding_model(tmp_path)
    runner = ModelRunner(spec, "float32", device, num_blocks=40, block_size=BLOCK_SIZE, weights_path=str(tmp_path))
    batch_prompts = prompts(spec.vocab_size)[:3]
    assert serve(runner, batch_prompts, chunk=6) == [hf_greedy(hf, p) for p in batch_prompts]
    assert calls["paged_attention"] > 0


@pytest.mark.parametrize(("prefix_caching", "backend"), [(False, "torch"), (True, "torch"), (True, "triton")])
def test_sliding_window_on_the_hybrid_allocator(tmp_path, monkeypatch, prefix_caching, backend):
    """sim/'s scheduler frees the blocks that leave the window (the null block takes their place in the block
    table, as vLLM's SlidingWindowManager does), prefix hits skip them, a small pool preempts: the tokens
    still equal transformers' generate()."""
    from gpu_engine.engine import drain
    from sim.kv_groups import HybridKVCacheManager
    from sim.metrics import Recorder
    from sim.request import Request
    from sim.scheduler import build_scheduler

    device = count_triton_calls(monkeypatch)[0] if backend == "triton" else "cpu"
    hf, spec = _sliding_model(tmp_path)
    g = torch.Generator().manual_seed(3)
    shared = torch.randint(0, spec.vocab_size, (16,), generator=g).tolist()
    batch_prompts = [torch.randint(0, spec.vocab_size, (n,), generator=g).tolist() for n in (30, 9, 22, 41, 5)]
    batch_prompts[1] = shared + batch_prompts[1]  # a shared prefix for prefix caching to hit
    batch_prompts[4] = shared + batch_prompts[4]
    num_blocks = 7  # 6 usable: a 16-token chunk takes 4 blocks, a decode within the window 1 or 2
    # Admission on the first chunk (vLLM's older rule): it over-admits, so the tiny pool forces preemptions, whose
    # recomputation the outputs must survive.
    base = make_scenario(
        model="tiny-llama",
        dtype="float32",
        hardware={"gpu": "cpu"},
        engine={"block_size": BLOCK_SIZE, "max_num_batched_tokens": 16, "max_num_seqs": 4, "max_model_len": 128,
                "num_gpu_blocks_override": num_blocks, "enable_prefix_caching": prefix_caching,
                "scheduler_reserve_full_isl": False},
    )  # fmt: skip
    scenario = dataclasses.replace(base, model=spec)
    runner = ModelRunner(spec, "float32", device, num_blocks, BLOCK_SIZE, weights_path=str(tmp_path),
                         cuda_graph_sizes=())  # fmt: skip
    recorder = Recorder(num_blocks, BLOCK_SIZE)
    scheduler = build_scheduler(EngineFacts.of(scenario), num_blocks, recorder)
    kv = scheduler.kv
    assert isinstance(kv, HybridKVCacheManager) and kv.groups.sliding == (True,)
    freed = []
    remove = kv._remove_skipped_blocks
    monkeypatch.setattr(kv, "_remove_skipped_blocks", lambda *a: (remove(*a), freed.append(a[0][0].count(0))))
    requests = [Request(i, 0.0, len(p), 9, prompt_token_ids=p) for i, p in enumerate(batch_prompts)]
    for request in requests:
        scheduler.add_request(request)
    drain(scheduler, runner, lambda: 0.0)
    for request, prompt in zip(requests, batch_prompts):
        assert request.output_token_ids == hf_greedy(hf, prompt), f"request {request.request_id}"
    assert max(freed) >= 8  # a 50-token context keeps 2 of its 13 blocks
    assert recorder.num_preemptions > 0, "the pool was meant to force preemption"
    assert kv.pool.num_free_blocks == num_blocks - 1
