"""Calibration of speculative decoding's drafting terms (planner/calibration/draft_fit.py): the fit recovers known
terms from synthetic drafting steps, a profile without them prices drafting as before, and a term fitted to the
live CPU engine's timed drafting is what `planner simulate` then uses."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from helpers import needs_torch

from planner.calibration.draft_fit import DRAFT_TERMS, DRAFTING, fit_drafting, predict_drafting, with_drafting
from planner.calibration.fitting import fit_steps
from planner.calibration.profile import profile_from_fit, save_profile
from planner.calibration.profile_loader import load_profile
from planner.cli import main
from planner.errors import PlannerError
from planner.scenario.load import load_scenario
from sim.cost_coefficients import CostCoefficients
from sim.draft_cost import DRAFT_COLUMNS, DRAFT_STEP, NGRAM_S_PER_CONTEXT_TOKEN, DraftCost
from sim.engine_facts import EngineFacts
from sim.scheduler_output import SchedulerOutput

EAGLE = "scenarios/cpu_tiny_eagle.yaml"
NGRAM = "engine.speculative={method: ngram, num_speculative_tokens: 3, synthetic_acceptance_rates: [0.8, 0.6, 0.4]}"


def synthetic_drafting(scenario, truth: CostCoefficients, noise: float, n: int = 200) -> dict[str, np.ndarray]:
    """Drafting steps of random shapes (1-16 rows, a first pass of 1-40 tokens a row over 8-400 tokens of
    context), their seconds priced with `truth` and scattered by `noise` (relative)."""
    rng = np.random.default_rng(7)
    rows = rng.integers(1, 17, n).astype(float)
    new = rows * rng.integers(1, 41, n)
    context = rows * rng.integers(8, 401, n) + new
    shapes = {
        "num_rows": rows,
        "num_tokens": new,
        "attention_pairs": (context - new) * new / rows + new * (new / rows + 1) / 2,
        "context_tokens": context,
        "later_context_tokens": context + 1.5 * rows,
    }
    seconds = predict_drafting(EngineFacts.of(scenario), truth, shapes | {"draft_s": np.ones(n)})
    return shapes | {"draft_s": seconds * np.exp(rng.normal(0.0, noise, n))}


@pytest.mark.parametrize(
    "sets, terms",
    [
        ((), {"draft_pass_overhead_s": 4e-4}),
        ((NGRAM,), {"ngram_overhead_s": 3e-5, "ngram_s_per_context_token": 1.5e-7}),
    ],
    ids=["eagle", "ngram"],
)
def test_the_fit_recovers_known_drafting_terms_from_noisy_synthetic_steps(sets, terms):
    scenario = load_scenario(EAGLE, sets)
    target = CostCoefficients(flops_efficiency=0.3, bandwidth_efficiency=0.4, per_row_layer_overhead_s=5e-5)
    truth = dataclasses.replace(target, **terms)
    fit = fit_drafting(scenario, target, synthetic_drafting(scenario, truth, noise=0.03))
    assert set(fit.result.names) == set(terms)
    for name, value, std in zip(fit.result.names, fit.result.values, fit.result.std):
        assert getattr(fit.coefficients, name) == value == pytest.approx(terms[name], rel=0.1), name
        assert 0 < std < 0.1 * terms[name]  # 200 steps pin it
    assert fit.coefficients.flops_efficiency == 0.3  # the target's terms are held
    assert fit.stats["median"] < 0.04 < np.median(np.abs(fit.uncalibrated_errors))  # the term explains them
    assert fit.result.at_bound == ()


def test_too_few_drafting_steps_or_no_drafting_are_refused():
    scenario = load_scenario(EAGLE)
    rows = synthetic_drafting(scenario, CostCoefficients(draft_pass_overhead_s=1e-4), 0.0, n=5)
    with pytest.raises(PlannerError, match="5 drafting steps measured; .* at least 20"):
        fit_drafting(scenario, CostCoefficients(), rows)
    with pytest.raises(PlannerError, match="no engine.speculative"):
        fit_drafting(load_scenario(EAGLE, ("engine.speculative=null",)), CostCoefficients(), rows)


def test_without_the_terms_drafting_is_priced_as_it_was():
    assert not set(DRAFT_TERMS) & set(CostCoefficients().to_dict())
    out = SchedulerOutput()
    out.num_tokens, out.num_seqs, out.num_sampled, out.attention_pairs, out.sum_context_tokens = 40, 4, 4, 900, 500
    ngram_facts = EngineFacts.of(load_scenario(EAGLE, (NGRAM,)))
    assert DraftCost(ngram_facts).step_s(out) == NGRAM_S_PER_CONTEXT_TOKEN * 500
    fitted = CostCoefficients(ngram_overhead_s=2e-5, ngram_s_per_context_token=1e-7)
    assert DraftCost(ngram_facts, fitted).step_s(out) == pytest.approx(2e-5 + 1e-7 * 500)
    # a drafter's term is not the lookup's, nor the other way round
    assert (
        DraftCost(ngram_facts, CostCoefficients(draft_pass_overhead_s=1.0)).step_s(out)
        == NGRAM_S_PER_CONTEXT_TOKEN * 500
    )
    facts = EngineFacts.of(load_scenario(EAGLE))
    drafter = DraftCost(facts).drafter
    plain = drafter.device_s(40, 4, 4, 900, 500) + 2 * drafter.device_s(4, 4, 4, 500, 500)
    assert DraftCost(facts).step_s(out) == plain
    # the fitted term: once per pass, k = 3 passes; the lookup's terms are not a drafter's
    assert DraftCost(facts, CostCoefficients(draft_pass_overhead_s=1e-3)).step_s(out) == pytest.approx(plain + 3e-3)
    assert DraftCost(facts, CostCoefficients(ngram_overhead_s=1.0, ngram_s_per_context_token=1.0)).step_s(out) == plain


@needs_torch
def test_a_term_fitted_to_the_live_engines_drafting_is_what_simulate_uses(tmp_path, capsys):
    import torch

    from gpu_engine.engine import run_scenario

    scenario = load_scenario(EAGLE, ("workload.num_requests=12",))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # the target's terms from its steps without drafting (calibrate sweeps them), then the drafting runs
        plain_run = run_scenario(load_scenario(EAGLE, ("workload.num_requests=12", "engine.speculative=null")), "cpu")
        live = run_scenario(scenario, "cpu")
    finally:
        torch.set_num_threads(threads)
    assert plain_run.drafts is None
    drafts = live.drafts
    assert set(drafts) == {DRAFT_STEP, *DRAFT_COLUMNS} and len(drafts["draft_s"]) >= 20
    assert np.all(drafts["draft_s"] > 0) and np.all(drafts["num_rows"] >= 1)
    assert np.all(drafts["num_tokens"] >= drafts["num_rows"])  # a first pass: a token a row at least
    # the drafting timed is part of the steps', not more
    assert drafts["draft_s"].sum() < live.recorder.steps.view()["device_s"].sum()
    target = fit_steps(scenario, plain_run.recorder.steps.view(), robust=True)
    drafting = fit_drafting(scenario, target.coefficients, drafts)
    term = drafting.coefficients.draft_pass_overhead_s
    assert term >= 0 and drafting.coefficients.flops_efficiency == target.coefficients.flops_efficiency
    device = {"name": "cpu", "kind": "cpu", "gpu": "cpu"}
    plain = profile_from_fit(scenario, target, "live-runs", {}, None, "test", device)
    profile = with_drafting(plain, drafting)
    assert profile.id != plain.id and set(profile.fit["by_class"][DRAFTING]) == {"rows", "median", "p90"}
    assert profile.coefficients["draft_pass_overhead_s"] == term
    path = save_profile(profile, tmp_path / "eagle.yaml")
    assert load_profile(path) == profile
    shares = {}
    for name, prof in (("fitted", profile), ("plain", plain)):
        capsys.readouterr()
        saved = save_profile(prof, tmp_path / f"{name}.yaml")
        assert main(["simulate", EAGLE, "--calibration", str(saved), "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["cost_model_provenance"]["profile_id"] == prof.id
        shares[name] = summary["spec_decode"]["draft_time_share"]
        assert summary["cost_model"].get("draft_pass_overhead_s") == (term if name == "fitted" else None)
    assert (shares["fitted"] > shares["plain"]) == (term > 0)  # a cost per pass: drafting weighs more


MTP_SCENARIO = """\
model: {name: tiny-mtp, model_type: llama, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2,
        num_attention_heads: 4, num_key_value_heads: 2, vocab_size: 512, max_position_embeddings: 2048,
        num_nextn_predict_layers: 1}
dtype: float32
hardware: {gpu: cpu}
engine:
  num_gpu_blocks_override: 64
  speculative: {method: mtp, num_speculative_tokens: 1, synthetic_acceptance_rates: [0.8]}
workload: {num_requests: 4, arrival: {rate: 10.0}}
"""


@needs_torch
def test_calibrate_refuses_a_method_the_live_engine_cannot_draft_before_sweeping(tmp_path, capsys):
    """mtp: the live model builds no MTP modules (eagle3 it drafts: tests/test_speculative_live.py)."""
    scenario = tmp_path / "mtp.yaml"
    scenario.write_text(MTP_SCENARIO)
    assert main(["calibrate", "--device", "cpu", str(scenario), "--out", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err
    assert (
        str(scenario) in err and "method mtp" in err and "no MTP modules" in err and "cannot time its drafting" in err
    )
    assert not (tmp_path / "p.yaml").exists()
