"""Speculative decoding in the live CPU engine: the same scheduler steps, the same accepted counts as the simulator
(acceptance is the scenario's seeded draws in both), verify rows of 1 + k query tokens through the real forward,
drafts from an n-gram lookup or a one-layer draft head built from config; and the Triton paged-attention kernel on
rows of several query tokens (Triton's interpreter on CPU)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gpu_engine.engine import drain
from gpu_engine.runner import ModelRunner
from gpu_engine.speculative import NgramProposer, SpeculativeRunner
from planner.scenario.load import load_scenario
from sim.engine_facts import EngineFacts
from sim.metrics import Recorder
from sim.scheduler import build_scheduler
from sim.workload import generate_workload, make_request

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "cpu_tiny_eagle.yaml"
EAGLE3 = ROOT / "scenarios" / "cpu_tiny_eagle3.yaml"
NGRAM = "engine.speculative={method: ngram, num_speculative_tokens: 3, synthetic_acceptance_rates: [0.8, 0.6, 0.4], draft_rate: 0.5}"
COLUMNS = ("num_tokens", "num_seqs", "num_prefill_tokens", "num_decode_requests", "num_sampled", "num_preemptions")
NUM_REQUESTS = 6


def _run(scenario, live: bool):
    """Every request present from the start (no clock in the schedule): the step rows, the acceptance counts and
    the replies, stepped by the simulator's update (no tokens) or executed by the live runner."""
    facts = EngineFacts.of(scenario)
    blocks = scenario.engine.num_gpu_blocks_override
    recorder = Recorder(blocks, scenario.engine.block_size)
    scheduler = build_scheduler(facts, blocks, recorder, seed=scenario.workload.seed)
    workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
    requests = [make_request(workload, i, 0.0, with_token_ids=live) for i in range(NUM_REQUESTS)]
    for request in requests:
        scheduler.add_request(request)
    clock = iter(range(1, 100_000)).__next__
    if live:
        runner = ModelRunner(scenario.model, scenario.dtype, "cpu", None, scenario.engine.block_size, seed=0)
        runner = SpeculativeRunner(runner, scenario.engine.speculative, seed=0)
        runner.allocate(blocks)
        drain(scheduler, runner, lambda: float(clock()))
    else:
        while scheduler.num_unfinished:
            out = scheduler.schedule()
            scheduler.update(out, float(clock()))
            scheduler.record_step(out, 0.0, 1.0, 0)
    steps = recorder.steps.view()
    return {c: steps[c].tolist() for c in COLUMNS}, recorder.spec.to_dict(), requests


@pytest.mark.parametrize("path", [SCENARIO, EAGLE3], ids=["eagle", "eagle3"])
def test_live_engine_takes_the_simulators_steps_and_accepted_counts(path):
    """The draft heads' scenarios as shipped (arrivals aside); tests/helpers/parity.py's speculative cases hold the
    two commands to the same steps, this the acceptance counts too."""
    scenario = load_scenario(path)
    sim_steps, sim_spec, sim_requests = _run(scenario, live=False)
    live_steps, live_spec, live_requests = _run(scenario, live=True)
    assert live_steps == sim_steps
    for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"):
        assert live_spec[key] == sim_spec[key], key
    assert sim_spec["num_draft_tokens"] > sim_spec["num_accepted_tokens"] > 0
    assert any(n > scenario.engine.speculative.num_speculative_tokens for n in live_steps["num_tokens"])
    for sim_r, live_r in zip(sim_requests, live_requests):
        assert len(live_r.output_token_ids) == live_r.num_output_tokens == sim_r.num_output_tokens
        assert live_r.num_output_tokens == live_r.max_output_tokens


def test_an_eagle3_head_drafts_over_its_draft_vocabulary_the_simulator_prices():
    """Its LM head has draft_vocab_size outputs, the simulator's drafter (sim/draft_model.py) prices an LM head of
    as many, and every draft is a target id that its d2t table maps a draft id onto."""
    scenario = load_scenario(EAGLE3)
    spec = scenario.engine.speculative
    runner = ModelRunner(scenario.model, scenario.dtype, "cpu", None, scenario.engine.block_size, seed=0)
    runner = SpeculativeRunner(runner, spec, seed=0)
    head = runner.proposer.model
    assert head.lm_head.out_features == spec.model.draft_vocab_size == 128 < scenario.model.vocab_size
    assert head.embed_tokens.num_embeddings == scenario.model.vocab_size  # it reads the target's token ids
    assert EngineFacts.of(scenario).draft.model.vocab_size == head.lm_head.out_features
    targets = runner.proposer.target_ids.tolist()
    assert len(set(targets)) == 128 and targets == sorted(targets) and max(targets) < scenario.model.vocab_size
    runner.allocate(scenario.engine.num_gpu_blocks_override)
    recorder = Recorder(scenario.engine.num_gpu_blocks_override, scenario.engine.block_size)
    scheduler = build_scheduler(EngineFacts.of(scenario), scenario.engine.num_gpu_blocks_override, recorder, seed=0)
    workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
    drafted = []
    propose = runner.proposer.propose

    def recording(requests):
        drafts = propose(requests)
        drafted.append(drafts)
        return drafts

    runner.proposer.propose = recording
    for i in range(NUM_REQUESTS):
        scheduler.add_request(make_request(workload, i, 0.0, with_token_ids=True))
    clock = iter(range(1, 100_000)).__next__
    drain(scheduler, runner, lambda: float(clock()))
    tokens = [t for step in drafted for draft in step.values() for t in draft]
    assert len(tokens) > 50 and set(tokens) <= set(targets)


def test_ngram_proposer_proposes_what_followed_the_latest_match():
    spec = load_scenario(SCENARIO, (NGRAM,)).engine.speculative
    proposer = NgramProposer(dataclasses.replace(spec, prompt_lookup_min=2, prompt_lookup_max=5))
    #                    an n-gram "7 8 9" seen twice: the latest match's continuation (1 2 3) is proposed
    assert proposer._lookup([7, 8, 9, 4, 5, 6, 7, 8, 9, 1, 2, 3, 0, 7, 8, 9]) == [1, 2, 3]
    assert proposer._lookup([1, 2, 3, 4]) == [2, 3, 4]  # no match: the context's last tokens fill the draft


def test_the_cli_runs_a_speculative_scenario_live_and_reports_the_counts(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "planner.cli", "run", str(SCENARIO), "--device", "cpu", "--out", str(tmp_path),
         "--set", "workload.num_requests=6"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "Speculative decoding (eagle, k = 3): mean acceptance length" in run.stdout


def test_triton_paged_attention_takes_several_query_tokens_per_request():
    """A verify row is 1 + k query tokens over a paged context: the Triton kernel (through Triton's interpreter on
    CPU) gives what the torch reference gives, causal among the new tokens, beside a one-token decode row."""
    pytest.importorskip("triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("without CUDA the Triton path needs TRITON_INTERPRET=1 (tests/conftest.py sets it)")
    from gpu_engine import attention
    from gpu_engine.runner import allocate_kv_caches, build_batch
    from sim.request import Request

    spec = load_scenario(SCENARIO).model
    torch.manual_seed(0)
    k_cache, v_cache = allocate_kv_caches(spec, 16, 4, torch.float32, device)[0]
    k_cache.normal_(), v_cache.normal_()
    rows, next_block = [], 1
    for i, (prompt, n) in enumerate(((10, 4), (3, 4), (15, 1))):  # two verify rows of 1 + 3, one decode row
        r = Request(i, 0.0, num_prompt_tokens=prompt, max_output_tokens=8, prompt_token_ids=list(range(prompt)))
        r.num_computed_tokens = prompt - 1
        num_blocks = -(-(prompt - 1 + n) // 4)
        r.block_ids, next_block = list(range(next_block, next_block + num_blocks)), next_block + num_blocks
        rows.append((r, n))
    batch = build_batch(rows, 4, device, drafts={0: [5, 6, 7], 1: [1, 2, 3]})
    a = batch.attn
    assert a.max_query_len == 4 and a.query_start_loc.tolist() == [0, 4, 8, 9]
    q = torch.randn(9, spec.num_attention_heads, spec.head_dim, device=device)
    args = (q, k_cache, v_cache, a.block_tables, a.seq_lens, a.query_start_loc, spec.head_dim**-0.5)
    out = attention.triton_ops().paged_attention(*args, max_query_len=a.max_query_len)
    ref = attention.TORCH_OPS.paged_attention(*args)
    np.testing.assert_allclose(out.cpu().numpy(), ref.cpu().numpy(), rtol=1e-4, atol=1e-4)
    assert batch.logits_per_request == (4, 4, 1)  # every verified position of a verify row is sampled
