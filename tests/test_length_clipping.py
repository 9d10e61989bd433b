"""Length distributions that clipping to their [min, max] changes: the workload records it and the CLI says so."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from sim.config import ArrivalConfig, Distribution, WorkloadConfig
from sim.workload import generate_workload


def test_a_length_distribution_that_clipping_changes_is_said():
    # Replies of normal(200, 300): a quarter of the draws fall below 1 token and are clipped to it, which moves
    # the mean by +20%: the workload says so (planner prints it), where a narrow one says nothing.
    wide = WorkloadConfig(
        num_requests=4000,
        arrival=ArrivalConfig(process="poisson", rate=5.0),
        output_tokens=Distribution("normal", mean=200, std=300),
    )
    (clip,) = generate_workload(wide, 100_000).clipped
    assert clip.field == "output_tokens" and 0.2 < clip.share < 0.3
    assert clip.mean_after / clip.mean_before == pytest.approx(1.2, abs=0.05)
    narrow = replace(wide, output_tokens=Distribution("normal", mean=200, std=40))
    assert generate_workload(narrow, 100_000).clipped == ()


def test_the_clipping_warning_names_the_file_and_field(capsys):
    from planner.cli import main

    distribution = "workload.output_tokens={dist: normal, mean: 200, std: 300}"
    assert main(["validate", "scenarios/a10_qwen7b.yaml", "--set", distribution]) == 0
    err = capsys.readouterr().err
    assert "planner: warning: scenarios/a10_qwen7b.yaml: workload.output_tokens: normal mean 200 std 300" in err
    assert "which moves their mean by +41.9 tokens (+20.9% of the mean asked), to 250.8" in err
    # a mean near 0: the draws' own mean before clipping may be negative; the shift is said against the mean asked
    wide = "workload.output_tokens={dist: normal, mean: 20, std: 1000}"
    assert main(["validate", "scenarios/a10_qwen7b.yaml", "--set", wide]) == 0
    assert re.search(r"moves their mean by \+[\d,.]+ tokens \(\+[\d,.]+% of the mean asked\)", capsys.readouterr().err)


def test_a_shared_prefix_longer_than_prompts_is_said(tmp_path, capsys):
    # The prefix was cut to each shorter prompt without a word: 1,000 tokens asked, 10 shared.
    from planner.cli import main

    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "model: tiny-llama\nhardware: {gpu: cpu}\nworkload: {num_requests: 10, arrival: {rate: 20},"
        " prompt_tokens: {dist: fixed, value: 10}, output_tokens: {dist: fixed, value: 4},"
        " shared_prefix: {tokens: 1000, group_size: 2}}\n"
    )
    assert main(["simulate", str(scenario), "--json"]) == 0
    err = capsys.readouterr().err
    assert (
        f"planner: warning: {scenario}: workload.shared_prefix.tokens 1,000 is longer than 10 of the 10 prompts"
        " (100.0%; mean prompt 10.0 tokens): those share their whole prompt" in err
    )
