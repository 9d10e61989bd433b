"""ModelRunner.execute over many steps: chunked prefill and decode mixed in one batch, blocks reused after a
preemption, and the tokens equal transformers' greedy generate() of each prompt alone. Plus sampling and profiling.

The steps come from tests/helpers/engine.py's `serve`, a stand-in scheduler (a free list of block ids, a fixed
chunk size) that mutates the requests exactly as the real scheduler's update does, which the runner never does.
"""

import pytest

torch = pytest.importorskip("torch")

from helpers.engine import BLOCK_SIZE, SHARP, TINY, hf_greedy, prompts, serve, sharp_tiny_hf

from gpu_engine.profiling import profile_num_blocks
from gpu_engine.runner import BlockTableRows, ModelRunner, SamplingParams, build_batch, kv_block_bytes
from planner.catalog import model_spec_from_hf_config
from sim.request import Request


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_greedy_tokens_equal_transformers_generate(model_type, tmp_path):
    hf, spec = sharp_tiny_hf(model_type, tmp_path, tie_word_embeddings=model_type == "qwen2")
    runner = ModelRunner(spec, "float32", "cpu", num_blocks=40, block_size=BLOCK_SIZE, weights_path=str(tmp_path))
    batch_prompts = prompts(spec.vocab_size)
    expected = [hf_greedy(hf, p) for p in batch_prompts]
    assert len({t for out in expected for t in out}) > 8  # not a model that repeats one token

    assert serve(runner, batch_prompts, chunk=6) == expected
    # request 1 (13-token prompt, 6-token chunks) decodes from step 3; evicted at step 5, recomputed from scratch
    assert serve(runner, batch_prompts, chunk=6, preempt=(1, 5)) == expected


def test_seeded_sampling_repeats_and_top_p_near_zero_is_greedy():
    spec = model_spec_from_hf_config({"model_type": "llama", **TINY, **SHARP}, "tiny-llama")
    batch_prompts = prompts(spec.vocab_size)

    def run(seed, sampling):
        runner = ModelRunner(spec, "float32", "cpu", 40, BLOCK_SIZE, seed=seed, sampling=sampling)
        return serve(runner, batch_prompts, chunk=8)

    hot = SamplingParams(temperature=1.5, top_p=0.95)
    assert run(1, hot) == run(1, hot)
    assert run(1, hot) != run(2, hot)
    assert run(1, SamplingParams(temperature=1.0, top_p=1e-6)) == run(1, SamplingParams())
    # below float32's smallest normal number (1.2e-38) top_p compared as 0 and masked every token
    assert run(1, SamplingParams(temperature=1.0, top_p=1e-50)) == run(1, SamplingParams())


def test_a_prefill_chunk_short_of_the_end_samples_nothing_and_blocks_must_cover_the_step():
    spec = model_spec_from_hf_config({"model_type": "llama", **TINY, **SHARP}, "tiny-llama")
    runner = ModelRunner(spec, "float32", "cpu", 8, BLOCK_SIZE, sampling=SamplingParams(temperature=1.0))
    request = Request(0, 0.0, 9, 1, prompt_token_ids=list(range(9)))
    request.block_ids = [0, 1]
    assert runner.execute([(request, 8)]) == {}
    assert request.num_computed_tokens == 0  # the runner never updates a request
    with pytest.raises(ValueError, match="2 blocks of 4 cannot hold 9 tokens"):
        runner.execute([(request, 9)])


def test_profile_on_cpu_uses_the_given_total_and_measured_activations():
    spec = model_spec_from_hf_config({"model_type": "llama", **TINY, **SHARP}, "tiny-llama")
    runner = ModelRunner(spec, "float32", "cpu", num_blocks=None, block_size=16)
    total = 64 << 20
    small = profile_num_blocks(runner, 64, 8, 0.5, total_memory_bytes=total)
    big = profile_num_blocks(runner, 512, 8, 0.5, total_memory_bytes=total)

    rope_table_bytes = spec.max_position_embeddings * spec.head_dim * 4
    assert big["weights_bytes"] == spec.num_params * 4 + rope_table_bytes
    assert big["block_bytes"] == kv_block_bytes(spec, 16, torch.float32) == 2 * 2 * 16 * 2 * 16 * 4
    # at least the fused gate_up output of every token and the float32 logits of the sampled rows
    assert big["activation_bytes"] >= 512 * 2 * spec.intermediate_size * 4 + 8 * spec.vocab_size * 4
    assert big["activation_bytes"] > small["activation_bytes"]
    assert big["non_torch_bytes"] == 0
    left = total // 2 - big["weights_bytes"] - big["activation_bytes"]
    assert big["kv_cache_bytes"] == left
    assert big["num_gpu_blocks"] == left // big["block_bytes"]

    runner.allocate(big["num_gpu_blocks"])
    assert runner.num_blocks == big["num_gpu_blocks"]
    with pytest.raises(ValueError, match="before allocating"):
        profile_num_blocks(runner, 64, 8, 0.5, total_memory_bytes=total)


def test_profile_on_cpu_needs_a_total():
    spec = model_spec_from_hf_config({"model_type": "llama", **TINY, **SHARP}, "tiny-llama")
    runner = ModelRunner(spec, "float32", "cpu", num_blocks=None, block_size=16)
    with pytest.raises(ValueError, match="total_memory_bytes"):
        profile_num_blocks(runner, 64, 8, 0.9)


def test_build_batch_packs_one_aligned_buffer():
    prefill = Request(0, 0.0, 10, 1, prompt_token_ids=list(range(100, 110)))
    prefill.num_computed_tokens, prefill.block_ids = 4, [6, 2, 9]  # a chunk of 5 after 4 cached tokens
    decode = Request(1, 0.0, 3, 2, prompt_token_ids=[7, 8, 9])
    decode.num_computed_tokens, decode.block_ids = 3, [4]
    decode.output_token_ids, decode.num_output_tokens = [11], 1
    batch = build_batch([(prefill, 5), (decode, 1)], 4, "cpu")
    attn = batch.attn
    assert batch.input_ids.tolist() == [104, 105, 106, 107, 108, 11]
    assert batch.positions.tolist() == [4, 5, 6, 7, 8, 3]
    assert attn.slot_mapping.tolist() == [8, 9, 10, 11, 36, 19]  # block 2 (id 2), block 3 (id 9); id 4
    assert attn.block_tables.tolist() == [[6, 2, 9], [4, 0, 0]]
    assert attn.seq_lens.tolist() == [9, 4] and attn.query_start_loc.tolist() == [0, 5, 6]
    assert attn.logits_indices.tolist() == [5] and batch.sampled_request_ids == [1]  # the chunk stops short
    assert attn.max_query_len == 5
    tensors = (batch.input_ids, batch.positions, attn.slot_mapping, attn.block_tables, attn.seq_lens,
               attn.query_start_loc, attn.logits_indices)  # fmt: skip
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1  # one buffer, one copy to the device
    assert all(t.data_ptr() % 64 == 0 for t in tensors)  # the same pointer alignment every step


def test_block_table_rows_follow_appends_and_replaced_lists():
    rows = BlockTableRows()
    request = Request(0, 0.0, 9, 1, prompt_token_ids=list(range(9)))
    request.block_ids = [3, 1]
    assert rows.update([request])[0].tolist() == [3, 1]
    request.block_ids += [7] * 40  # appended in place, past the row's capacity
    assert rows.update([request])[0].tolist() == [3, 1] + [7] * 40
    request.block_ids = [2]  # freed and allocated again (a preemption): a new list
    assert rows.update([request])[0].tolist() == [2]
    request.block_ids.append(5)
    assert rows.update([request])[0].tolist() == [2, 5]
