"""The mechanisms the seeds describe, as properties of the simulator (not frozen numbers)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.runs import assert_same_run
from helpers.scenarios import make_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.block_pool import NULL_BLOCK_ID, BlockPool
from sim.driver import simulate
from sim.metrics import summarize


def run(scenario, **kwargs):
    result = simulate(scenario, **kwargs)
    return result, summarize(result.recorder, scenario.slo)


def test_continuous_batching_doubles_static_throughput_on_mixed_lengths():
    saturated = {
        "num_requests": 300,
        "arrival": {"process": "poisson", "rate": 200.0},
        "output_tokens": {"dist": "uniform", "low": 8, "high": 1024},
    }
    _, continuous = run(make_scenario(workload=saturated))
    _, static = run(
        make_scenario(workload=saturated, engine={"scheduler": "static", "max_num_seqs": 64, "max_model_len": 2048})
    )
    assert continuous["output_throughput"] >= 2 * static["output_throughput"]


def test_paged_kv_keeps_slots_full_and_contiguous_wastes_them():
    _, paged = run(make_scenario())
    contiguous_result, contiguous = run(make_scenario(engine={"kv_cache": "contiguous"}))
    paged_result, _ = run(make_scenario())
    assert paged["kv_slot_utilization"] >= 0.90
    assert contiguous["kv_slot_utilization"] <= 0.60
    # Reserving max_model_len per request admits fewer at once: fewer running rows on average.
    mean_rows = lambda r: np.mean(r.recorder.steps.view()["num_running"])
    assert mean_rows(contiguous_result) < mean_rows(paged_result)


def test_max_num_seqs_trades_tpot_for_throughput_until_kv_binds():
    small_pool = {"num_gpu_blocks_override": 600, "max_model_len": 2048}  # 9,600 tokens of KV
    results = {}
    for seqs in (2, 8, 128):
        _, results[seqs] = run(
            make_scenario(
                engine={**small_pool, "max_num_seqs": seqs}, workload={"arrival": {"process": "poisson", "rate": 100.0}}
            )
        )
    assert results[2]["output_throughput"] < results[8]["output_throughput"]
    assert results[2]["median_tpot_ms"] < results[8]["median_tpot_ms"]
    assert results[2]["num_preemptions"] == results[8]["num_preemptions"] == 0
    assert results[128]["num_preemptions"] > 0  # 128 requests of ~500 tokens cannot all fit in 9,600 tokens


@pytest.mark.parametrize("name", ["a10", "h100-sxm"])
def test_tpot_never_beats_reading_the_weights(name):
    scenario = make_scenario(hardware={"gpu": name})
    result, _ = run(scenario)
    floor_ms = result.cost_model.floors(1.0)["tpot_floor_ms"]
    requests = result.recorder.requests.view()
    tpot_ms = (requests["finished_s"] - requests["first_token_s"]) / (requests["output_tokens"] - 1) * 1e3
    assert tpot_ms.min() >= floor_ms


def test_fast_forward_matches_stepping_one_by_one():
    scenario = make_scenario(workload={"arrival": {"process": "poisson", "rate": 4.0}})
    assert_same_run(simulate(scenario), simulate(scenario, fast_forward=False), scenario)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arrival=st.sampled_from(
        [
            {"process": "poisson", "rate": 10.0},
            {"process": "gamma", "rate": 20.0, "burstiness": 0.3},
            {"process": "closed", "concurrency": 3, "think_time_s": 0.0},
            {"process": "closed", "concurrency": 4, "think_time_s": 0.05},
        ]
    ),
    prefix_caching=st.booleans(),
    kv_cache=st.sampled_from(["paged", "contiguous"]),
    replicas=st.integers(1, 2),
    seed=st.integers(0, 1000),
    shared=st.booleans(),
    num_gpu_blocks=st.sampled_from([60, 200]),
    eager=st.booleans(),
)
def test_fast_forward_matches_stepping_over_random_scenarios(
    arrival, prefix_caching, kv_cache, replicas, seed, shared, num_gpu_blocks, eager
):
    """The reference (fast_forward=False) steps one by one and registers every block in the prefix cache at
    allocation; the fast paths (decode windows, deferred registration of private blocks, windows' blocks
    drawn at once) must give the same run, step rows included. 60 blocks: preemptions, hits on a preempted
    request's own blocks, and windows while the queue's head is blocked. Eager (serial): arrivals join the
    queue during a step rather than after the next schedule()."""
    scenario = make_scenario(
        hardware={"replicas": replicas},
        engine={"enable_prefix_caching": prefix_caching, "kv_cache": kv_cache, "max_model_len": 512,
                "max_num_seqs": 8, "num_gpu_blocks_override": num_gpu_blocks, "enforce_eager": eager},
        workload={"num_requests": 30, "seed": seed, "arrival": arrival,
                  "prompt_tokens": {"dist": "uniform", "low": 1, "high": 200},
                  "output_tokens": {"dist": "uniform", "low": 1, "high": 250},
                  **({"shared_prefix": {"tokens": 64, "group_size": 3}} if shared else {})},
    )  # fmt: skip
    assert_same_run(simulate(scenario), simulate(scenario, fast_forward=False), scenario)


def _spy_windows(monkeypatch) -> list:
    """Record every decode window the driver takes (a white-box check that the fast path is taken at all)."""
    from sim import replica

    windows, take = [], replica.Replica._window

    def spy(self, *args):
        window = take(self, *args)
        windows.append(window)
        return window

    monkeypatch.setattr(replica.Replica, "_window", spy)
    return windows


def test_a_window_runs_through_requests_last_tokens(monkeypatch):
    """Open loop and nobody waiting: the batch shrinks inside one window as requests sample their last tokens,
    the window's step rows say so, and the run is stepping's."""
    scenario = make_scenario(
        workload={"num_requests": 6, "arrival": {"process": "poisson", "rate": 1e6},
                  "output_tokens": {"dist": "uniform", "low": 40, "high": 400}},
    )  # fmt: skip
    windows = _spy_windows(monkeypatch)
    fast = simulate(scenario)
    # some window went through a finish (rows: one int when nobody finishes in it)
    assert any(not isinstance(w.rows, int) and w.rows[-1] < w.rows[0] for w in windows)
    steps = fast.recorder.steps.view()
    shrinking = np.flatnonzero(np.diff(steps["num_seqs"]) < 0)
    assert len(shrinking) >= 5  # six requests leave the batch one by one (some may share a last step)
    assert_same_run(fast, simulate(scenario, fast_forward=False), scenario)


def test_async_window_takes_the_step_after_an_arrivals(monkeypatch):
    """Async scheduling: the step after the one an arrival came in is still pure decode and joins the window;
    the arrival is first scheduled in the step after that (vLLM v1's N+2), as when stepping."""
    scenario = make_scenario(workload={"num_requests": 40, "arrival": {"process": "poisson", "rate": 2.0}})
    assert not scenario.engine.enforce_eager
    windows = _spy_windows(monkeypatch)
    fast = simulate(scenario)
    assert sum(w.arrival_step for w in windows) >= 20
    assert_same_run(fast, simulate(scenario, fast_forward=False), scenario)


def test_least_outstanding_router_counts_requests_finished_inside_a_window():
    """Two replicas: an arrival is routed while a window is in flight on the other replica; requests that
    finished in its steps before the arrival no longer count as outstanding there, as when stepping."""
    scenario = make_scenario(
        hardware={"replicas": 2, "router": "least_outstanding"},
        workload={"num_requests": 150, "arrival": {"process": "poisson", "rate": 12.0},
                  "output_tokens": {"dist": "uniform", "low": 8, "high": 300}},
    )  # fmt: skip
    assert_same_run(simulate(scenario), simulate(scenario, fast_forward=False), scenario)


def test_same_seed_gives_identical_results_and_another_seed_does_not():
    _, a = run(make_scenario())
    _, b = run(make_scenario())
    _, c = run(make_scenario(workload={"seed": 1}))
    assert a == b
    assert a != c


engine_configs = st.fixed_dictionaries(
    {
        "scheduler": st.sampled_from(["continuous", "static"]),
        "kv_cache": st.sampled_from(["paged", "contiguous"]),
        "block_size": st.sampled_from([1, 4, 16]),
        "enable_chunked_prefill": st.booleans(),
        "enable_prefix_caching": st.booleans(),
        "max_num_seqs": st.integers(1, 12),
        "max_num_batched_tokens": st.sampled_from([64, 300]),
        "num_gpu_blocks_override": st.integers(0, 200),
    }
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    engine=engine_configs,
    seed=st.integers(0, 10_000),
    closed=st.booleans(),
    replicas=st.integers(1, 2),
    shared=st.booleans(),
)
def test_conservation_over_random_workloads(engine, seed, closed, replicas, shared, monkeypatch_blocks):
    max_model_len = 256
    # A pool that holds at least one request of max_model_len (as fit checks guarantee for real runs).
    min_blocks = -(-max_model_len // engine["block_size"]) + 1  # + vLLM's null block
    engine = {
        **engine,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": max(engine["max_num_batched_tokens"], 256),
        "num_gpu_blocks_override": min_blocks + engine["num_gpu_blocks_override"],
    }
    arrival = {"process": "closed", "concurrency": 3} if closed else {"process": "poisson", "rate": 30.0}
    workload = {
        "num_requests": 25,
        "seed": seed,
        "arrival": arrival,
        "too_long": "truncate",
        "prompt_tokens": {"dist": "uniform", "low": 1, "high": 200},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 80},
    }
    if shared:
        workload["shared_prefix"] = {"tokens": 40, "group_size": 4}
    scenario = make_scenario(
        model="tiny-llama",
        dtype="float32",
        hardware={"gpu": "a10", "replicas": replicas},
        engine=engine,
        workload=workload,
    )
    result, _ = run(scenario)
    requests = result.recorder.requests.view()
    wl = result.workload
    ids = np.sort(requests["request_id"])
    np.testing.assert_array_equal(ids, np.arange(len(wl)))  # every request finished, once
    order = np.argsort(requests["request_id"])
    np.testing.assert_array_equal(requests["output_tokens"][order], wl.output_tokens)
    assert np.all(requests["first_token_s"] >= requests["arrival_s"])
    assert np.all(requests["finished_s"] >= requests["first_token_s"])
    for pool in monkeypatch_blocks:  # every pool of every replica ends with every block free, once
        assert pool.num_free_blocks == pool.num_blocks - 1 and pool.num_used_blocks == 0
        # all but the null block; never-used ones are not stored
        assert sorted(pool.free_block_queue) == list(range(1, pool.num_touched))
        assert not any(pool.ref_cnt)
    monkeypatch_blocks.clear()


@pytest.fixture
def monkeypatch_blocks(monkeypatch):
    """Records every BlockPool made and fails if one hands out a block that is still referenced."""
    pools = []
    original_init, original_get = BlockPool.__init__, BlockPool.get_new_blocks

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        pools.append(self)

    def get_new_blocks(self, n):
        ids = original_get(self, n)
        assert len(set(ids)) == len(ids), "a block handed out twice in one allocation"
        assert all(self.ref_cnt[i] == 1 for i in ids), "a block handed out while still referenced"
        assert NULL_BLOCK_ID not in ids, "the null block handed out"
        return ids

    monkeypatch.setattr(BlockPool, "__init__", init)
    monkeypatch.setattr(BlockPool, "get_new_blocks", get_new_blocks)
    return pools


def test_prefix_caching_skips_the_shared_prompt():
    shared = {
        "shared_prefix": {"tokens": 384, "group_size": 8},
        "prompt_tokens": {"dist": "uniform", "low": 400, "high": 512},
        "arrival": {"process": "poisson", "rate": 2.0},
    }
    _, cached = run(make_scenario(engine={"enable_prefix_caching": True}, workload=shared))
    _, uncached = run(make_scenario(engine={"enable_prefix_caching": False}, workload=shared))
    assert cached["mean_ttft_ms"] < 0.7 * uncached["mean_ttft_ms"]


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_two_replicas_behind_a_router_nearly_double_saturated_throughput(router):
    saturated = {"num_requests": 400, "arrival": {"process": "poisson", "rate": 400.0}}
    _, one = run(make_scenario(workload=saturated))
    _, two = run(make_scenario(workload=saturated, hardware={"replicas": 2, "router": router}))
    # Not quite 2x: the drain at the end, when batches empty out, is as long on each replica.
    assert 1.7 * one["request_throughput"] <= two["request_throughput"] <= 2.05 * one["request_throughput"]
