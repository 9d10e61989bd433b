"""Decode steps through gpu_engine.cuda_graphs.DecodeGraphs give the eager path's tokens.

On CPU (always): the graphs' padded fixed buffers run eagerly (capture=False), so the padding (slot -1, seq_len
1, stale block-table rows) and the one-token-chunk rows that sample nothing are checked on any machine.
On CUDA (skipped without): captured graphs against eager decode, token for token, and no Triton kernel
compiles after warm-up.
"""

import pytest

torch = pytest.importorskip("torch")

from helpers.engine import SHARP, TINY, prompts, serve

from gpu_engine.runner import ModelRunner
from planner.catalog import model_spec_from_hf_config

BLOCK_SIZE = 4
SIZES = (1, 2, 4)  # smaller than the batch of 4 prompts at times: some decode steps stay eager


def tiny_runner(device: str, **kwargs) -> ModelRunner:
    spec = model_spec_from_hf_config({"model_type": "llama", **TINY, **SHARP}, "tiny-llama")
    return ModelRunner(spec, "float32", device, 40, BLOCK_SIZE, seed=5, **kwargs)


@pytest.mark.parametrize("chunk", [6, 1])  # 1: every prefill chunk is one token, most sample nothing
def test_padded_decode_buffers_give_the_eager_tokens_on_cpu(chunk):
    eager = serve(tiny_runner("cpu"), prompts(TINY["vocab_size"]), chunk=chunk)
    runner = tiny_runner("cpu", cuda_graph_sizes=SIZES)
    runner.use_decode_graphs(capture=False)
    assert serve(runner, prompts(TINY["vocab_size"]), chunk=chunk) == eager
    assert runner.decode_graphs.num_replays > 0


def test_capture_sizes_must_be_positive():
    runner = tiny_runner("cpu", cuda_graph_sizes=(0, 2))
    with pytest.raises(ValueError, match="capture sizes"):
        runner.use_decode_graphs(capture=False)


def compiled_kernels() -> int:
    """Compiled variants held by every Triton kernel of kernels/ (all devices)."""
    from triton.runtime.jit import JITFunction

    import planner_kernels.activation
    import planner_kernels.paged_attention
    import planner_kernels.rms_norm
    import planner_kernels.rotary
    import planner_kernels.store_kv

    modules = (
        planner_kernels.activation,
        planner_kernels.paged_attention,
        planner_kernels.rms_norm,
        planner_kernels.rotary,
        planner_kernels.store_kv,
    )
    fns = [f for m in modules for f in vars(m).values() if isinstance(f, JITFunction)]
    return sum(len(cache[0]) for f in fns for cache in f.device_caches.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_cuda_graph_decode_gives_the_eager_tokens_and_nothing_recompiles():
    pytest.importorskip("triton")
    batch_prompts = prompts(TINY["vocab_size"])
    eager = serve(tiny_runner("cuda", cuda_graph_sizes=()), batch_prompts, chunk=6)
    runner = tiny_runner("cuda", cuda_graph_sizes=SIZES)
    assert runner.decode_graphs is not None and sorted(runner.decode_graphs.graphs) == list(SIZES)
    assert serve(runner, batch_prompts, chunk=6) == eager  # warm-up: the eager steps compile their variants
    replays = runner.decode_graphs.num_replays
    assert replays > 0
    before = compiled_kernels()
    longer = [p * 2 for p in batch_prompts]  # other lengths, other block-table widths, other batch mixes
    serve(runner, longer, chunk=5)
    assert compiled_kernels() == before, "a Triton kernel compiled after warm-up"
    assert runner.decode_graphs.num_replays > replays


def test_the_live_engine_captures_the_decode_batches_the_simulator_replays():
    from gpu_engine.cuda_graphs import DEFAULT_CAPTURE_SIZES, capture_sizes

    assert DEFAULT_CAPTURE_SIZES == (1, 2, 4, *range(8, 257, 8))
    assert capture_sizes(0) == () and capture_sizes(20) == (1, 2, 4, 8, 16)
    assert capture_sizes(512)[-3:] == (480, 496, 512) and 264 not in capture_sizes(512)  # every 16 above 256
