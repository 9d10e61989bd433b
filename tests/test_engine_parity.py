"""The live engine on sim/'s own scheduler and block pool: greedy tokens under continuous batching, with
chunked prefill, mixed prompt lengths and a pool small enough to preempt, equal transformers' generate()
of each prompt alone (tiny random Llama and Qwen2, float32; CPU, and the Triton kernels on CUDA or, without
a GPU, through Triton's interpreter)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from helpers.engine import TINY, count_triton_calls, hf_greedy, sharp_tiny_hf
from helpers.scenarios import make_scenario

from gpu_engine.engine import drain
from gpu_engine.runner import ModelRunner, SamplingParams
from sim.engine_facts import EngineFacts
from sim.metrics import Recorder
from sim.request import Request
from sim.scheduler import build_scheduler

MAX_NEW_TOKENS = 9  # hf_greedy's length
PROMPT_LENGTHS = [5, 13, 1, 22, 40, 7, 31, 18]
BLOCK_SIZE = 4


@pytest.mark.parametrize(
    "model_type, prefix_caching, backend",
    [
        ("llama", False, "torch"),
        ("llama", True, "torch"),
        ("qwen2", False, "torch"),
        ("qwen2", True, "torch"),
        ("llama", True, "triton"),
    ],
)
def test_scheduler_driven_generation_matches_transformers(tmp_path, monkeypatch, model_type, prefix_caching, backend):
    device, triton_calls = count_triton_calls(monkeypatch) if backend == "triton" else ("cpu", None)
    hf, spec = sharp_tiny_hf(model_type, tmp_path)
    g = torch.Generator().manual_seed(3)
    shared = torch.randint(0, TINY["vocab_size"], (12,), generator=g).tolist()
    # Two requests share a 12-token prefix, so prefix caching has something to hit.
    prompts = [torch.randint(0, TINY["vocab_size"], (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
    prompts[5] = shared + prompts[5]
    prompts[6] = shared + prompts[6]
    max_len = max(len(p) for p in prompts) + MAX_NEW_TOKENS
    num_blocks = 2 * -(-max_len // BLOCK_SIZE)  # two long requests' worth: the rest must wait or be preempted
    scenario = make_scenario(
        model="tiny-llama",
        dtype="float32",
        hardware={"gpu": "cpu"},
        engine={
            "block_size": BLOCK_SIZE,
            "max_num_batched_tokens": 16,
            "max_num_seqs": 6,
            "max_model_len": 128,
            "num_gpu_blocks_override": num_blocks,
            "enable_prefix_caching": prefix_caching,
        },
    )
    # eager decode: this test counts every layer's kernel calls (tests/test_engine_cuda_graphs.py has the graphs)
    runner = ModelRunner(spec, "float32", device, num_blocks, BLOCK_SIZE, sampling=SamplingParams(),
                         weights_path=str(tmp_path), cuda_graph_sizes=())  # fmt: skip
    recorder = Recorder(num_blocks, BLOCK_SIZE)
    scheduler = build_scheduler(EngineFacts.of(scenario), num_blocks, recorder)
    requests = [Request(i, 0.0, len(p), MAX_NEW_TOKENS, prompt_token_ids=p) for i, p in enumerate(prompts)]
    for request in requests:
        scheduler.add_request(request)
    drain(scheduler, runner, lambda: 0.0)

    assert recorder.num_preemptions > 0, "the pool was meant to force preemption"
    assert recorder.steps.view()["num_prefill_tokens"].max() <= 16  # chunked within the token budget
    for request, prompt in zip(requests, prompts):
        assert request.output_token_ids == hf_greedy(hf, prompt), f"request {request.request_id}"
    assert scheduler.kv.pool.num_free_blocks == num_blocks - 1  # every block is free again but the null block
    if triton_calls is not None:
        layer_calls = recorder.num_steps * spec.num_hidden_layers  # every layer of every step
        assert triton_calls == {
            "paged_attention": layer_calls,
            "store_kv": layer_calls,
            "rotary": layer_calls,
            "silu_and_mul": layer_calls,
            "rms_norm": 2 * layer_calls + recorder.num_steps,  # two per layer, and the final norm
        }
