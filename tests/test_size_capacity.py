"""`planner size`'s capacity search (planner/sizing/capacity.py), its analytic bound (bound.py) and its probes'
steady-state verdict (probe.py)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ROOT
from helpers.sizing import probe_result

from planner.sizing.candidates import enumerate_candidates
from planner.sizing.capacity import find_capacity
from planner.sizing.probe import LONGER_PROBE, LONGEST_PROBE, queue_grows, run_probe, unserved_fraction
from planner.sizing.search import run_search
from planner.sizing.spec import load_sizing

BASE = "scenarios/a10_qwen7b.yaml"
SMALL = ["search.probe.num_requests=40", "search.probe.max_probes=4"]


@pytest.mark.parametrize("true_capacity", [0.37, 3.0, 41.5])
def test_capacity_search_brackets_the_true_capacity_from_any_guess(true_capacity):
    for guess in (true_capacity / 10, true_capacity * 0.9, true_capacity * 10):
        cap = find_capacity(lambda x: probe_result(x, x <= true_capacity), "rate", guess, None, 12, 0.1)
        assert true_capacity / 1.1 <= cap.load <= true_capacity


@pytest.mark.parametrize("true_capacity", [3.0, 40.0])
def test_a_galloping_search_from_a_close_guess_still_brackets_a_far_capacity(true_capacity):
    # stepping by a constant 1.1 from 10 would need 15 probes to pass 40; squaring the step needs about 8
    cap = find_capacity(
        lambda x: probe_result(x, x <= true_capacity), "rate", 10.0, None, 10, 0.1, step=1.1, gallop=True
    )
    assert true_capacity / 1.1 <= cap.load <= true_capacity and len(cap.probes) <= 10
    assert any(not p.met for p in cap.probes) and any(p.met for p in cap.probes)


def test_capacity_search_in_users_stops_at_an_integer_bracket():
    cap = find_capacity(lambda x: probe_result(x, x <= 13), "users", 4, 60, 12, 0.01)
    assert cap.load == 13
    assert cap.best.load == 13 and all(p.met == (p.load <= 13) for p in cap.probes)


@pytest.mark.parametrize("kind", ["rate", "users"])
def test_a_probe_passing_at_the_upper_bound_lifts_it(kind):
    # The bound is meant to be one no steady state passes; one that passes there shows the bound wrong (it
    # capped capacity once: prefix-cached prompts and async steps cost less than it counted), so search on.
    cap = find_capacity(lambda x: probe_result(x, x <= 40), kind, 4, 5, 12, 0.1)
    assert 40 / 1.1 <= cap.load <= 40
    assert find_capacity(lambda x: probe_result(x, x <= 4.5), kind, 4, 5, 12, 0.1).load <= 5  # a true bound still holds


@pytest.mark.parametrize(("max_probes", "lower_bound"), [(2, True), (3, True), (12, False)])
def test_a_search_out_of_probes_above_a_pass_reports_a_lower_bound(max_probes, lower_bound):
    # 2 probes bracketed 174.7 req/s between 134.7 (passed) and 269.5 (failed) and reported 134.7 as if measured.
    cap = find_capacity(lambda x: probe_result(x, x <= 174.7), "rate", 134.7, None, max_probes, 0.1)
    assert cap.lower_bound is lower_bound and cap.load <= 174.7
    assert not find_capacity(lambda x: probe_result(x, x <= 13), "users", 4, 60, 12, 0.01).lower_bound


def test_no_capacity_when_even_the_lightest_load_fails():
    cap = find_capacity(lambda x: probe_result(x, False), "users", 8, None, 12, 0.1)
    assert cap.load == 0 and cap.best is None and cap.lightest.load == 1


def test_a_queue_growing_to_the_end_is_not_a_steady_state():
    arrival = np.linspace(0, 100, 1001)
    steady = arrival + 0.5  # each served in half a second
    growing = arrival + 0.5 + 0.2 * arrival  # each waits longer than the one before
    assert not queue_grows(arrival, steady)
    assert queue_grows(arrival, growing)


def test_the_rate_bound_is_above_every_simulated_capacity():
    q = load_sizing(
        ROOT / BASE,
        [
            *SMALL,
            "search.demand.rate=2.0",
            "search.candidates.gpus=[a10, l4]",
            "search.candidates.tensor_parallel_sizes=[1]",
        ],
    )
    out = run_search(q, workers=1)
    assert out.evaluated
    for r in out.evaluated:
        assert r.evaluation.capacity.load <= r.analytic.rate_bound


@pytest.mark.parametrize(
    "overrides",
    [
        # Shared 1,900-token prefixes of 2,000-token prompts, 4-token replies: a prefix cache serves 95% of the
        # prompts (the bound once charged every prompt token: 10 replicas where 1 did).
        [
            "model=qwen2.5-7b",
            "workload.arrival={process: poisson, rate: 4}",
            "workload.prompt_tokens={dist: fixed, value: 2000}",
            "workload.output_tokens={dist: fixed, value: 4}",
            "workload.shared_prefix={tokens: 1900, group_size: 1000}",
            "engine.enable_prefix_caching=true",
            "slo={ttft_ms: {p99: 2000}}",
            "search.demand={rate: 40, headroom: 1.0}",
            "search.candidates.gpus=[a100-80gb]",
            "search.probe.num_requests=300",
        ],
        # Short prompts and replies under async scheduling: a step's host side hides behind its device side (the
        # bound once added them: 3 replicas where 2 did).
        [
            "model=llama-3.1-8b",
            "workload.arrival={process: poisson, rate: 4}",
            "workload.prompt_tokens={dist: fixed, value: 32}",
            "workload.output_tokens={dist: fixed, value: 64}",
            "slo={ttft_ms: {p99: 3000}}",
            "search.demand={rate: 600, headroom: 1.0}",
            "search.candidates.gpus=[h100-sxm]",
            "search.probe.num_requests=1000",  # fewer end before the queue's growth can be told from noise
        ],
    ],
    ids=["prefix-cached", "async"],
)
def test_the_rate_bound_holds_where_prefix_caching_or_async_steps_save_time(overrides):
    # A probe that passes at the bound lifts it (find_capacity), so a bound too low shows as a capacity above it.
    q = load_sizing(
        ROOT / BASE, [*overrides, "search.candidates.tensor_parallel_sizes=[1]", "search.probe.max_probes=8"]
    )
    out = run_search(q, workers=1)
    assert out.evaluated
    for r in out.evaluated:
        assert 0 < r.evaluation.capacity.load <= r.analytic.rate_bound


def test_a_capacity_that_cannot_beat_the_best_stops_at_oneprobe_result():
    cap = find_capacity(lambda x: probe_result(x, x <= 5), "rate", 4.0, None, 8, 0.1, step=1.1, must_reach=6.0)
    assert cap.short_of == 6.0 and cap.load == 0 and len(cap.probes) == 1
    cap = find_capacity(lambda x: probe_result(x, x <= 7), "rate", 4.0, None, 8, 0.1, step=1.1, must_reach=6.0)
    assert cap.short_of is None and 7 / 1.1 <= cap.load <= 7


H100_SCENARIO = (
    "model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\nengine: {max_model_len: 4096}\n"
    "workload: {arrival: {process: poisson, rate: 4}, prompt_tokens: {dist: fixed, value: 32},"
    " output_tokens: {dist: fixed, value: 64}}\nslo: {ttft_ms: {p99: 3000}}\n"
)
# Regression golden: this candidate's capacity per replica under the shipped H100 calibration, as
#   planner size H100.yaml --set "search.candidates={gpus: [h100-sxm], tensor_parallel_sizes: [1]}" \
#     --set search.probe.num_requests=400 --set "search.demand={rate: 400}"
# reports it (H100.yaml: H100_SCENARIO). The loads below are fractions of it; regenerate it when the shipped
# calibration changes.
H100_CAPACITY_RPS = 320.19


def _h100_candidate(tmp_path):
    """Llama-3.1-8B on one H100 with 32 + 64-token requests (H100_CAPACITY_RPS)."""
    path = tmp_path / "h100.yaml"
    path.write_text(H100_SCENARIO)
    return enumerate_candidates(
        load_sizing(path, ["search.candidates={gpus: [h100-sxm], tensor_parallel_sizes: [1]}"])
    )[0][0]


def test_a_probe_too_short_to_tell_filling_from_growing_runs_again_longer(tmp_path):
    # 400 requests of 32 + 64 tokens at 78% of the capacity take 0.57 s each over 1.3 s of arrivals: still filling
    # in the second quarter, they read as a growing queue (saturated), where LONGER_PROBE times as many run steady.
    candidate = _h100_candidate(tmp_path)
    steady = run_probe(candidate.scenario, "rate", 0.78 * H100_CAPACITY_RPS, 400, candidate.coefficients)
    assert steady.met and not steady.saturated and steady.num_requests == 400 * LONGER_PROBE
    overloaded = run_probe(candidate.scenario, "rate", 1.57 * H100_CAPACITY_RPS, 400, candidate.coefficients)
    assert not overloaded.met and overloaded.saturated  # longer, it is still overloaded


def test_a_slow_overload_is_not_a_steady_state(tmp_path):
    # 18% over the capacity: over LONGEST_PROBE x 400 requests the system holds 1.37x as many requests in the last
    # quarter as in the second (not past queue_grows' factor), and the p99 TTFT (1.1 s) meets its 3 s bound; a
    # tenth of the second half's arrivals stay unserved. It passed once, and the capacity with it.
    candidate = _h100_candidate(tmp_path)
    overloaded = run_probe(candidate.scenario, "rate", 1.18 * H100_CAPACITY_RPS, 400, candidate.coefficients)
    assert overloaded.num_requests == 400 * LONGEST_PROBE and all(met for *_, met in overloaded.checks)
    assert overloaded.saturated and not overloaded.met
    assert run_probe(candidate.scenario, "rate", 0.92 * H100_CAPACITY_RPS, 400, candidate.coefficients).met


def test_unserved_fraction_is_the_growth_of_the_system_over_the_second_half():
    arrival = np.linspace(0, 100, 1001)  # 10 req/s
    steady = arrival + 0.5
    # served at 9 req/s from t=0 on: the system grows by 1 request a second, a tenth of the arrivals
    one_tenth_short = np.arange(1, 1002) / 9.0
    assert unserved_fraction(arrival, steady) == 0.0
    assert unserved_fraction(arrival, one_tenth_short) == pytest.approx(0.1, rel=0.02)
