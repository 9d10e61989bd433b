"""Speculative decoding (`engine.speculative`, vLLM's --speculative-config): the scenario's checks, the shared
scheduler's verify rows (1 + k tokens, lookahead slots, rejected drafts rolled back), the seeded acceptance, the
cost of verifying and drafting, the drafter's memory and the summary's counts."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.errors import ScenarioError
from planner.scenario.load import load_scenario, scenario_to_dict
from sim.acceptance import AcceptanceDraws, rates_from_length
from sim.cost_model import CostModel
from sim.draft_cost import DraftCost
from sim.draft_model import draft_spec
from sim.driver import simulate
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown
from sim.metrics import summarize

ROOT = Path(__file__).resolve().parent.parent
EAGLE3 = ROOT / "scenarios" / "h100_llama31_8b_eagle3.yaml"
DEEPSEEK = ROOT / "scenarios" / "h200x8_deepseek_v3_tp8.yaml"


def _small(*more: str, requests: int = 6):
    """The EAGLE-3 scenario cut to a few requests of fixed lengths (fast), with the given overrides."""
    return load_scenario(
        EAGLE3,
        (
            f"workload.num_requests={requests}",
            "workload.prompt_tokens={dist: fixed, value: 100}",
            "workload.output_tokens={dist: fixed, value: 40}",
            *more,
        ),
    )


@pytest.mark.parametrize(
    ("override", "key", "says"),
    [
        ("engine.speculative.num_speculative_tokens=0", "engine.speculative.num_speculative_tokens = 0", "[1, 16]"),
        ("engine.speculative.num_speculative_tokens=40", "num_speculative_tokens = 40", "must be in [1, 16]"),
        ("engine.speculative.method=medusa", 'engine.speculative.method = "medusa"', "must be one of ngram, eagle"),
        ("engine.speculative.synthetic_acceptance_rates=[0.8, 1.5, 0.2]", "rates[1] = 1.5", "must be in [0, 1]"),
        ("engine.speculative.synthetic_acceptance_rates=[-0.1, 0, 0]", "rates[0] = -0.1", "must be in [0, 1]"),
        ("engine.speculative.synthetic_acceptance_rates=[0.5, 0.7, 0.2]", "rates[1] = 0.7", "never increase"),
        ("engine.speculative.synthetic_acceptance_rates=[0.5]", "synthetic_acceptance_rates", "one rate per"),
        ("engine.speculative.synthetic_acceptance_length=5", "synthetic_acceptance_length = 5", "[1, 4]"),
        ("engine.speculative.model.vocab_size=32000", "engine.speculative.model", "vocabularies must be the same"),
    ],
)
def test_bad_speculative_config_names_file_key_value_and_allowed(override, key, says):
    with pytest.raises(ScenarioError) as info:
        load_scenario(EAGLE3, (override,))
    message = str(info.value)
    assert message.startswith(str(EAGLE3)) and key in message and says in message, message


def test_mtp_on_a_model_without_mtp_layers_is_refused():
    with pytest.raises(ScenarioError) as info:
        load_scenario(EAGLE3, ("engine.speculative={method: mtp, num_speculative_tokens: 1}",))
    assert 'engine.speculative.method = "mtp"' in str(info.value) and "no multi-token-prediction" in str(info.value)


def test_mtp_on_deepseek_v3_is_accepted_and_a_k_without_published_default_asks_for_rates():
    s = load_scenario(DEEPSEEK, ("engine.speculative={method: mtp, num_speculative_tokens: 1}",))
    assert s.model.num_nextn_predict_layers == 1
    with pytest.raises(ScenarioError) as info:
        load_scenario(DEEPSEEK, ("engine.speculative={method: mtp, num_speculative_tokens: 3}",))
    assert "covers 1 position(s)" in str(info.value) and "synthetic_acceptance_rates" in str(info.value)


def test_validate_exits_2_with_one_line_and_no_traceback():
    run = subprocess.run(
        [sys.executable, "-m", "planner.cli", "validate", str(EAGLE3), "--set", "engine.speculative.method=medusa"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "engine.speculative.method" in run.stderr


def test_summary_of_a_plain_scenario_keeps_its_keys():
    d = scenario_to_dict(load_scenario(DEEPSEEK))
    assert "speculative" not in d["engine"] and "num_nextn_predict_layers" not in d["model"]


def test_rates_from_a_length_spend_it_on_the_earliest_positions():
    assert rates_from_length(3.78, 7) == (1.0, 1.0, 0.78, 0.0, 0.0, 0.0, 0.0)
    assert rates_from_length(1.0, 3) == (0.0, 0.0, 0.0)


def test_draws_follow_the_rates_and_depend_on_the_request_only():
    rates = np.array([0.8, 0.5, 0.2])
    draws = AcceptanceDraws(7, 3, rates, 1.0, 20_000)
    accepted = np.array(draws.accepted)
    for i, rate in enumerate(rates):  # share of draws accepting at least i + 1: the rate, within 4 std
        share = (accepted > i).mean()
        assert abs(share - rate) < 4 * math.sqrt(rate * (1 - rate) / len(accepted))
    again = AcceptanceDraws(7, 3, rates, 1.0, 50)
    assert again.accepted == draws.accepted[:50]  # the same request, the same draws however many are made
    assert AcceptanceDraws(7, 4, rates, 1.0, 50).accepted != again.accepted
    assert draws.accepted_at(0, 1) == min(draws.accepted[0], 1)


@pytest.mark.parametrize(("length", "k"), [(4.0, 3), (1.0, 3), (3.0, 5)])
def test_verify_steps_gain_accepted_plus_one_and_roll_back_the_rest(length, k):
    """Every draw accepts length - 1 drafts (integer lengths: no randomness), so a reply of 40 tokens takes its
    prefill step (token 1) and ceil(39 / length) verify steps; each verify row is 1 + k tokens and the request's
    computed tokens end at prompt + output - 1 (the rejected drafts came back off)."""
    s = _small(
        f"engine.speculative.num_speculative_tokens={k}",
        f"engine.speculative.synthetic_acceptance_length={length}",
        requests=1,
    )
    result = simulate(s)
    steps = result.recorder.steps.view()
    decode = steps["num_prefill_tokens"] == 0
    assert decode.sum() == math.ceil(39 / length)
    assert (steps["num_tokens"][decode] == 1 + k).all()  # no budget cut, max_model_len far
    spec = summarize(result.recorder, s.slo)["spec_decode"]
    assert spec["num_drafts"] == decode.sum()
    assert spec["num_draft_tokens"] == k * decode.sum()
    assert spec["mean_acceptance_length"] == pytest.approx(1 + spec["num_accepted_tokens"] / spec["num_drafts"])
    assert result.recorder.requests.view()["output_tokens"][0] == 40


def test_lookahead_slots_are_held_and_ngram_holds_none():
    """A decoding request's blocks cover its computed tokens, the step's 1 + k and k lookahead slots (model-based
    drafters write their drafts' KV there); n-gram needs no lookahead."""
    from sim.kv_groups import kv_pool_blocks
    from sim.metrics import Recorder
    from sim.request import Request
    from sim.scheduler import build_scheduler

    for method, extra in (("eagle3", 3), ("ngram", 0)):
        spec_text = f"{{method: {method}, num_speculative_tokens: 3, synthetic_acceptance_length: 2.0}}"
        s = _small(f"engine.speculative={spec_text}") if method == "ngram" else _small()
        facts = EngineFacts.of(s)
        blocks = kv_pool_blocks(facts, memory_breakdown(facts))
        sched = build_scheduler(facts, blocks, Recorder(blocks, 16), seed=0)
        request = Request(0, 0.0, num_prompt_tokens=31, max_output_tokens=40)
        sched.add_request(request)
        sched.update(sched.schedule(), 0.1)  # the prompt, and its first token
        out = sched.schedule()
        assert out.scheduled == [(request, 4)]
        assert len(request.block_ids) == math.ceil((31 + 4 + extra) / 16)


def test_verify_costs_little_more_than_a_decode_when_memory_bound():
    """At batch 1 a step reads every weight once whatever its tokens: verifying 3 drafts costs the extra flops
    and LM head rows only, far below a second decode step; the LM head runs over every verified row."""
    cost = CostModel(EngineFacts.of(_small()))
    off = CostModel(EngineFacts.of(_small("engine.speculative=null")))
    ctx = 300  # the decode row's context after its step; the verify row's token is the same one, and 3 drafts
    decode = off.device_s(1, 1, 1, ctx, ctx)
    pairs = 4 * (ctx - 1) + 4 * 5 // 2  # 4 queries over the ctx - 1 computed tokens, causal among themselves
    verify = cost.device_s(4, 1, 4, pairs, ctx + 3)
    assert decode < verify < 1.2 * decode
    # a uniform verify batch (1 + k tokens per row) replays a CUDA graph; the same tokens without speculation do not
    assert verify < off.device_s(4, 1, 4, pairs, ctx + 3)


def test_eagle_drafting_is_k_sequential_passes_of_the_head():
    s = _small()
    facts = EngineFacts.of(s)
    drafting = DraftCost(facts)
    head = CostModel(facts.draft)
    from sim.scheduler_output import SchedulerOutput

    out = SchedulerOutput(num_tokens=8, num_seqs=2, num_sampled=2, attention_pairs=600, sum_context_tokens=600)
    first = head.device_s(8, 2, 2, 600, 600)
    assert drafting.step_s(out) == pytest.approx(first + 2 * head.device_s(2, 2, 2, 600, 600))
    ngram = DraftCost(EngineFacts.of(_small("engine.speculative={method: ngram, num_speculative_tokens: 3}")))
    assert ngram.drafter is None and 0 < ngram.step_s(out) < 1e-5  # host lookups over 600 context tokens


def test_drafter_weights_and_kv_come_out_of_the_pool():
    """An EAGLE-3 head stores its decoder layer (qkv over [embedding; hidden]: 2h wide), its own LM head over the
    draft vocabulary and fc (3h -> h); the embedding is the target's. Its layer's KV joins every block."""
    s = _small()
    facts = EngineFacts.of(s)
    m, head = s.model, s.engine.speculative.model
    h, q, kv = m.hidden_size, m.q_size, m.kv_size
    layer = 2 * h * (q + 2 * kv) + q * h + 3 * h * head.intermediate_size + 2 * h  # qkv, o, gate/up/down, 2 norms
    expected = layer + head.draft_vocab_size * h + h + 3 * h * h  # + LM head, final norm, fc
    assert facts.draft_weights_bytes == pytest.approx(2 * expected, rel=1e-3)
    with_head, without = memory_breakdown(facts), memory_breakdown(EngineFacts.of(_small("engine.speculative=null")))
    assert with_head.draft_kv_bytes_per_token == 2 * 2 * kv  # one layer's K and V, bf16
    assert with_head.num_gpu_blocks < without.num_gpu_blocks
    mtp = draft_spec(load_scenario(DEEPSEEK).model, dataclasses.replace(s.engine.speculative, method="mtp"))
    assert mtp.num_hidden_layers == 1 and mtp.dense_layers == ()


def test_speculation_halves_tpot_at_light_load_and_costs_throughput_at_saturation():
    light = "workload.arrival={process: closed, concurrency: 1}"
    on, off = (
        summarize(simulate(_small(light, *x)).recorder, _small().slo) for x in ((), ("engine.speculative=null",))
    )
    assert on["mean_tpot_ms"] < 0.6 * off["mean_tpot_ms"]
    heavy = "workload.arrival={process: poisson, rate: 1000}"
    on = simulate(_small(heavy, "engine.speculative.num_speculative_tokens=5", requests=300)).recorder
    off = simulate(_small(heavy, "engine.speculative=null", requests=300)).recorder
    on, off = summarize(on, _small().slo), summarize(off, _small().slo)
    assert on["output_throughput"] < off["output_throughput"]


def test_serve_line_carries_the_speculative_config():
    from planner.sizing.serve import vllm_serve_command

    line = vllm_serve_command(load_scenario(EAGLE3))
    assert line.endswith(
        """--speculative-config '{"method": "eagle3", "num_speculative_tokens": 3,"""
        """ "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}'"""
    )
    assert "--speculative-config" not in vllm_serve_command(load_scenario(EAGLE3, ("engine.speculative=null",)))


def test_sizing_sweeps_speculation_off_method_and_k():
    from planner.sizing.candidates import enumerate_candidates
    from planner.sizing.spec import load_sizing

    question = load_sizing(ROOT / "scenarios" / "size_h100_llama31_8b_spec.yaml")
    kept, pruned = enumerate_candidates(question)
    assert not pruned
    assert [c.label for c in kept] == [
        f"h100-sxm tp1, spec {s}" for s in ("off", "eagle3 k=1", "eagle3 k=3", "eagle3 k=5")
    ]
    assert [c.scenario.engine.speculative is None for c in kept] == [True, False, False, False]


def test_a_simulation_without_fitted_drafting_says_its_gain_is_an_upper_bound(capsys):
    """Drafting priced from the drafter's facts alone came out too fast against vLLM's published EAGLE-3 runs
    (docs/fidelity.md): a simulation whose profile fits no drafting term says so under its speculative line; one
    whose profile fits the method's term, or a live run's measured summary, does not."""
    import json

    from planner.cli import main
    from planner.outputs.speculative import spec_decode_lines

    assert main(["simulate", str(ROOT / "scenarios" / "cpu_tiny_eagle.yaml"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mode"] == "simulated" and summary["cost_model"].get("draft_pass_overhead_s") is None
    line, caveat = spec_decode_lines(summary)
    assert line.startswith("Speculative decoding (eagle, k = 3)")
    assert "too fast" in caveat and "upper bound" in caveat
    fitted = summary | {"cost_model": summary["cost_model"] | {"draft_pass_overhead_s": 2e-4}}
    assert spec_decode_lines(fitted) == [line]
    assert spec_decode_lines(summary | {"mode": "measured"}) == [line]
    # n-gram's fitted terms are its lookup's costs, not a drafter's per-pass one
    ngram = summary | {"spec_decode": summary["spec_decode"] | {"method": "ngram"}}
    assert "no published ngram run checks it" in spec_decode_lines(fitted | {"spec_decode": ngram["spec_decode"]})[1]
    ngram_fitted = fitted["cost_model"] | {"ngram_s_per_context_token": 1e-9, "ngram_overhead_s": 1e-5}
    assert len(spec_decode_lines(ngram | {"cost_model": ngram_fitted})) == 1
