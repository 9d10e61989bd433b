"""Speculative decoding inside a data-parallel group (sim/data_parallel.py, sim/dp_drafting.py,
gpu_engine/data_parallel.py): each rank speculates its own requests, every request accepts the same counts on
whichever rank (or engine) it runs, a drafter model's passes are collective and idle ranks' dummy batches run them
too; the live CPU pair takes the simulator's steps and accepted counts; `planner size` weighs such groups."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from planner.cli import main
from planner.scenario.load import load_scenario
from planner.sizing.candidates import enumerate_candidates
from planner.sizing.report.speculation import _without_speculation
from planner.sizing.spec import load_sizing
from sim.data_parallel import DataParallelSimulation
from sim.dp_drafting import LockstepDrafting
from sim.draft_cost import DraftCost
from sim.driver import simulate
from sim.engine_facts import EngineFacts
from sim.workload import make_request

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
NGRAM_DP = SCENARIOS / "cpu_tiny_moe_dp_ngram.yaml"
DEEPSEEK_MTP_DP8 = SCENARIOS / "h200x8_deepseek_v3_dp8_ep_mtp.yaml"
HEAD = (
    "engine.speculative={method: eagle, num_speculative_tokens: 3, synthetic_acceptance_rates: [0.7, 0.45, 0.25],"
    " model: {name: head, model_type: llama, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 1,"
    " num_attention_heads: 4, num_key_value_heads: 2, vocab_size: 512, max_position_embeddings: 2048}}"
)
COUNTS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")


def test_every_request_accepts_the_same_in_the_group_as_on_one_engine():
    """The acceptance draws are each request's own (seeded by its id): two lockstep ranks and one engine verify the
    same drafts and accept the same, when no budget or max_model_len cuts a verify row."""
    group = simulate(load_scenario(NGRAM_DP))
    one = simulate(load_scenario(NGRAM_DP, ("hardware.data_parallel_size=1", "hardware.expert_parallel=false")))
    assert group.data_parallel["lockstep_steps"] > 0 and min(group.data_parallel["requests_per_rank"]) > 0
    a, b = group.recorder.spec.to_dict(), one.recorder.spec.to_dict()
    assert a["num_draft_tokens"] > a["num_accepted_tokens"] > 0
    assert {k: a[k] for k in COUNTS} == {k: b[k] for k in COUNTS}


def test_a_drafter_models_passes_are_the_groups_and_idle_ranks_run_them():
    """DeepSeek-V3's MTP layer over 8 ranks: every rank spends the same drafting seconds (its passes meet across the
    ranks), a dummy batch's one-token passes included, and the layer's routed experts and all-to-all add to its
    own dense work; with a rank busier the step's drafting grows."""
    s = load_scenario(DEEPSEEK_MTP_DP8)
    sim = DataParallelSimulation(s)
    facts = EngineFacts.of(s)
    drafting = LockstepDrafting(DraftCost(facts))
    assert drafting.moe is not None  # the MTP layer is an MoE layer under expert parallel
    for index in range(2):
        sim.route(make_request(sim.workload, index, 0.0))
    outs = [rank.scheduler.schedule() if rank.scheduler.num_unfinished else None for rank in sim.replicas]
    assert sum(out is None for out in outs) == 6  # six ranks have nothing: dummy batches
    per_rank = drafting.rank_s(outs)
    assert len(set(per_rank)) == 1 and per_rank[0] > 0
    own = DraftCost(facts)
    busiest = max(outs, key=lambda out: 0 if out is None else out.num_tokens)
    alone = own.first_pass_s(busiest.num_tokens, busiest.num_seqs, busiest.num_sampled, busiest.attention_pairs,
                             busiest.sum_context_tokens)  # fmt: skip
    assert per_rank[0] > alone  # + the group's routed experts and dispatch/combine of the MTP layer
    idle = drafting.rank_s([None] * 8)[0]
    assert 0 < idle < per_rank[0]


def test_verify_rows_go_through_the_moe_layers_and_drafting_is_in_the_step():
    """MTP on the 8-rank group against the same group without it: steps carry 1 + k query tokens per decoding row
    (more tokens than rows), drafting takes a share of the step time, and the summary says so."""
    s = load_scenario(DEEPSEEK_MTP_DP8, ("workload.num_requests=40",))
    result = simulate(s)
    rows = result.recorder.step_rows()
    verify = rows["num_tokens"] - rows["num_prefill_tokens"] > rows["num_decode_requests"]
    assert verify.any()
    spec = result.recorder.spec.to_dict()
    assert 0 < spec["draft_time_share"] < 0.5 and spec["draft_time_share"] + spec["verify_time_share"] == 1
    assert spec["num_draft_tokens"] == spec["num_drafts"]  # k = 1
    off = simulate(dataclasses.replace(s, engine=dataclasses.replace(s.engine, speculative=None)))
    assert result.data_parallel["lockstep_steps"] < off.data_parallel["lockstep_steps"]  # more tokens per step


def test_the_dp_summary_shows_acceptance_and_shares(tmp_path, capsys):
    out = tmp_path / "sim"
    assert main(["simulate", str(DEEPSEEK_MTP_DP8), "--set", "workload.num_requests=40", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Speculative decoding (mtp, k = 1): mean acceptance length" in text and "drafting" in text
    assert "Data parallel 8 ranks of 1 GPU(s)" in text and "--speculative-config" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["spec_decode"]["num_drafts"] > 0 and "all2all_share" in summary["data_parallel"]


def _steps(folder: Path) -> list[dict[str, str]]:
    with open(folder / "steps.csv", newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda row: float(row["start_s"]))
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]


@pytest.mark.parametrize("drafter", ["ngram", "head"])
def test_the_live_pair_takes_the_simulators_steps_and_accepted_counts(drafter, tmp_path, capsys):
    """Every request at t = 0 (no step depends on a duration): `planner run --device cpu` and `planner simulate`
    schedule the same rows on each rank, step by step, and accept the same drafts."""
    pytest.importorskip("torch")
    sets = [
        "workload.num_requests=12",
        "workload.arrival={process: closed, concurrency: 12, think_time_s: 0}",
        "workload.output_tokens={dist: uniform, low: 2, high: 24}",
        "engine.num_gpu_blocks_override=256",
        *([HEAD] if drafter == "head" else []),
    ]
    args = [arg for item in sets for arg in ("--set", item)]
    summaries, steps = [], []
    for command in (["simulate", "--all-steps"], ["run", "--device", "cpu"]):
        out = tmp_path / command[0]
        assert main([command[0], str(NGRAM_DP), *command[1:], "--out", str(out), *args]) == 0
        summaries.append(json.loads((out / "summary.json").read_text()))
        steps.append(_steps(out))
    capsys.readouterr()
    assert steps[0] == steps[1]
    assert {row["replica"] for row in steps[0]} == {"0", "1"}
    sim, live = (s["spec_decode"] for s in summaries)
    assert {k: sim[k] for k in COUNTS} == {k: live[k] for k in COUNTS}
    assert sim["num_draft_tokens"] > sim["num_accepted_tokens"] > 0
    assert live["draft_time_share"] > 0  # measured: every rank's proposing


def test_size_weighs_data_parallel_groups_with_speculation_each_on_its_own_layout(tmp_path):
    data = {
        "name": "size_dp_spec",
        "model": "qwen3-30b-a3b",
        "dtype": "bfloat16",
        "hardware": {"gpu": "h100-sxm"},
        "engine": {"max_model_len": 8192},
        "workload": {
            "num_requests": 40,
            "seed": 0,
            "arrival": {"process": "poisson", "rate": 10.0},
            "prompt_tokens": {"dist": "fixed", "value": 512},
            "output_tokens": {"dist": "fixed", "value": 64},
        },
        "slo": {"tpot_ms": {"p99": 50}},
        "search": {
            "demand": {"rate": 10},
            "candidates": {
                "gpus": ["h100-sxm"],
                "tensor_parallel_sizes": [1],
                "data_parallel_sizes": [1, 2],
                "expert_parallel": [True],
                "engine": {"speculative": [None, {"method": "ngram", "num_speculative_tokens": 2}]},
            },
        },
    }
    path = tmp_path / "size.yaml"
    path.write_text(yaml.safe_dump(data))
    kept, pruned = enumerate_candidates(load_sizing(path))
    assert not pruned
    labels = {c.label: c for c in kept}
    assert "h100-sxm tp1 dp2 ep, spec ngram k=2" in labels and "h100-sxm tp1 dp2 ep, spec off" in labels
    # the crossover curves vary speculation on the pick's own layout: a group and one GPU are not siblings
    key = {label: _without_speculation(SimpleNamespace(candidate=c)) for label, c in labels.items()}
    assert key["h100-sxm tp1 dp2 ep, spec ngram k=2"] == key["h100-sxm tp1 dp2 ep, spec off"]
    assert key["h100-sxm tp1, spec ngram k=2"] != key["h100-sxm tp1 dp2 ep, spec ngram k=2"]


def test_dual_batch_overlap_with_speculation_is_refused(capsys):
    sets = ["engine.enable_dbo=true", "engine.all2all_backend=deepep_low_latency"]
    assert main(["simulate", str(NGRAM_DP), *(a for s in sets for a in ("--set", s))]) == 2
    err = capsys.readouterr().err
    assert "engine.enable_dbo = true: dual-batch overlap of steps that verify drafts is not modelled" in err
    assert "Traceback" not in err
