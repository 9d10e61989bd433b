"""The step sweep: the grid stays within the scenario's limits, a stall is re-measured and never kept, and the
rows on the real tiny runner carry steps.csv's columns with the serving model's own aggregates."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpu_engine import reference_step, sweep, sweep_grid, sweep_timing
from gpu_engine.runner import ModelRunner
from planner.scenario.load import load_scenario
from sim.kv_manager import KVCacheManager
from sim.metrics import STEP_COLUMNS

# Its module-scoped fixture is computed once per pytest-xdist worker: every test of the module on one worker.
pytestmark = pytest.mark.xdist_group("test_calibration_sweep")


def test_grid_stays_within_the_limits_and_covers_every_class():
    grid = sweep_grid.design_grid(16, 256, 512, 16, max_blocks=10**9)
    assert {s.step_class for s in grid} == {"decode", "prefill", "mixed"}
    for s in grid:
        assert 1 <= s.num_seqs <= 16 and 1 <= s.num_tokens <= 256
        assert s.decode_context + 1 <= 512 and s.cached + s.chunk <= 512
    assert max(s.num_decode for s in grid) == 16  # up to max_num_seqs
    assert max(s.num_tokens for s in grid) == 256  # up to the token budget
    assert max(s.decode_context for s in grid) == 511  # up to max_model_len
    small = sweep_grid.design_grid(16, 256, 512, 16, max_blocks=40)
    assert small and all(s.num_blocks(16) <= 40 for s in small) and len(small) < len(grid)
    order = sweep_grid.sweep_order(grid)
    assert sorted(map(repr, order)) == sorted(map(repr, grid))
    assert {s.step_class for s in order[:3]} == {"decode", "prefill", "mixed"}  # classes interleaved


class FakeMachine:
    """Shape i takes true_s[i]; chosen calls stall (a busy second core) or a whole stretch runs slow."""

    def __init__(self, true_s, stalls=(), slow_calls=range(0)):
        self.true_s, self.stalls, self.slow_calls = true_s, set(stalls), slow_calls
        self.now, self.calls = 0.0, 0

    def clock(self):
        return self.now

    def time_shape(self, i):
        s = self.true_s[i] * (1 + 0.01 * ((self.calls * 7919) % 5 - 2))  # +-2% jitter
        if self.calls in self.stalls:
            s += 0.43
        if self.calls in self.slow_calls:
            s *= 1.6
        self.calls += 1
        self.now += s
        return s * 0.9, s * 0.1  # device, host


def test_a_stall_is_re_measured_not_kept():
    true_s = np.linspace(0.001, 0.01, 12)
    machine = FakeMachine(true_s, stalls={40, 41, 77})
    measured = sweep_timing.measure(len(true_s), machine.time_shape, machine.clock, budget_s=2.0)
    assert len(measured) == len(true_s)
    totals = [m.totals() for m in measured]
    assert all(t.max() < 0.1 for t in totals), "a 430 ms stall survived"
    assert sum(m.num_outliers for m in measured) >= 3
    medians = np.array([np.median(t) for t in totals])
    np.testing.assert_allclose(medians, true_s, rtol=0.03)
    assert machine.now <= 2.0 + 0.5  # the budget, give or take the step that crossed it


def test_a_slow_round_is_re_measured():
    true_s = np.full(10, 0.002)
    # round 0 = 30 calls (2 warm-ups + 1 timed per shape); calls 40..49 are round 2 of every shape
    machine = FakeMachine(true_s, slow_calls=range(40, 50))
    measured = sweep_timing.measure(len(true_s), machine.time_shape, machine.clock, budget_s=1.0)
    assert all(m.totals().max() < 0.0025 for m in measured)
    assert all(m.num_outliers >= 1 for m in measured)


def test_a_round_on_a_busy_machine_is_re_measured_even_when_it_does_not_look_slow():
    """Other processes' load may slow a CPU step by less than the outlier rules see: the round meter's
    verdict alone sends the round's samples back to be measured again."""
    true_s = np.full(10, 0.002)
    machine = FakeMachine(true_s)  # no sample is slow: only the meter says round 2 ran beside other work
    metered = []

    def round_meter():
        first_call = machine.calls
        return lambda: (metered.append(first_call) or first_call == 40, None)  # round 2 starts at call 40

    calm = sweep_timing.measure(len(true_s), FakeMachine(true_s).time_shape, machine.clock, 1.0)
    measured = sweep_timing.measure(len(true_s), machine.time_shape, machine.clock, 1.0, round_meter=round_meter)
    assert 40 in metered and len(metered) >= 3  # every round was metered
    assert sum(m.num_outliers for m in calm) == 0
    assert all(m.num_outliers == 1 for m in measured)  # round 2's sample of every shape, and only it
    assert all(all(r != 2 for r, _, _ in m.samples) for m in measured)
    assert all(len(m.samples) == len(c.samples) for m, c in zip(measured, calm))  # re-measured, not dropped


def test_a_round_where_the_machine_ran_slower_than_its_best_is_re_measured():
    """The reference step's time per round: a round 30% slower than the fastest round is measured again,
    one within SLOWER_THAN_BEST is kept (the machine slowing with nothing else in it)."""
    true_s = np.full(10, 0.002)
    machine = FakeMachine(true_s)
    speeds = {0: 0.0100, 1: 0.0104, 2: 0.0130, 3: 0.0101}  # by the call a round starts at: 0, 30, 40, 50

    def round_meter():
        start = {0: 0, 30: 1, 40: 2, 50: 3}.get(machine.calls)
        return lambda: (False, speeds.get(start, 0.0101))

    measured = sweep_timing.measure(len(true_s), machine.time_shape, machine.clock, 1.0, round_meter=round_meter)
    assert all(all(r != 2 for r, _, _ in m.samples) for m in measured)  # round 2 thrown out
    assert all(any(r == 1 for r, _, _ in m.samples) for m in measured)  # round 1 (4% slower) kept
    assert all(m.num_outliers == 1 for m in measured)


def test_the_budget_drops_shapes_rather_than_overrun():
    true_s = np.full(200, 0.01)
    machine = FakeMachine(true_s)
    measured = sweep_timing.measure(len(true_s), machine.time_shape, machine.clock, budget_s=3.0)
    assert 10 <= len(measured) < 200
    assert all(len(m.samples) >= sweep_timing.MIN_ROUNDS for m in measured)
    assert machine.now <= 3.0 + 0.05


def test_build_step_matches_the_schedulers_aggregates():
    shape = sweep_grid.Shape(num_decode=3, decode_context=40, num_prefill=1, chunk=30, cached=17, sampled=False)
    kv = KVCacheManager(64, 16, enable_caching=False)
    out = sweep_grid.build_step(shape, kv, 512, np.random.default_rng(0), itertools.count())
    assert out.num_decode_requests == 3 and out.num_prefill_tokens == 30 and out.num_sampled == 3
    assert out.sum_context_tokens == 3 * 41 + 47
    assert out.attention_pairs == 3 * 41 + 30 * 17 + 30 * 31 // 2
    for request, n in out.scheduled:
        assert len(request.block_ids) * 16 >= request.num_computed_tokens + n
    assert kv.pool.num_used_blocks == 3 * 3 + 3


@pytest.fixture(scope="module")
def tiny_rows():
    scenario = load_scenario("scenarios/cpu_tiny.yaml")
    e = scenario.engine
    num_blocks = sweep_grid.blocks_for_grid(e.max_num_seqs, e.max_num_batched_tokens, scenario.max_model_len, 16, 10**9)
    runner = ModelRunner(scenario.model, scenario.dtype, "cpu", num_blocks, e.block_size)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as calibrate runs on CPU; a shared CI box stalls two threads
    try:
        return sweep.run_sweep(runner, e, scenario.max_model_len, budget_s=5.0)
    finally:
        torch.set_num_threads(threads)


def test_rows_on_the_tiny_runner(tiny_rows):
    rows = tiny_rows
    assert set(STEP_COLUMNS) <= set(rows) and set(sweep.EXTRA_COLUMNS) <= set(rows)
    n = len(rows["duration_s"])
    assert n >= 10 and {"decode", "prefill", "mixed"} <= set(rows["step_class"])
    assert np.all(rows["device_s"] > 0) and np.all(rows["host_s"] > 0)
    np.testing.assert_allclose(rows["duration_s"], rows["device_s"] + rows["host_s"])
    np.testing.assert_array_equal(rows["num_tokens"], rows["num_prefill_tokens"] + rows["num_decode_requests"])
    assert np.all(rows["num_samples"] >= sweep_timing.MIN_ROUNDS) and np.all(rows["spread_rel"] >= 0)
    decode = rows["step_class"] == "decode"
    np.testing.assert_array_equal(rows["attention_pairs"][decode], rows["sum_context_tokens"][decode])


def test_left_over_budget_buys_samples_where_the_median_is_uncertain():
    true_s = np.full(6, 0.002)

    class Bimodal(FakeMachine):
        shape0_calls = 0

        def time_shape(self, i):
            device, host = super().time_shape(i)
            if i == 0:  # shape 0: every other call waits out a time slice
                self.shape0_calls += 1
                if self.shape0_calls % 2:
                    self.now += 0.004
                    device += 0.004
            return device, host

    machine = Bimodal(true_s)
    measured = sweep_timing.measure(len(true_s), machine.time_shape, machine.clock, budget_s=1.0)
    assert len(measured[0].samples) > len(measured[1].samples) == sweep_timing.MAX_ROUNDS
    assert sweep_timing.median_ci(measured[1].totals()) < sweep_timing.UNSTABLE_CI
    assert machine.now <= 1.0 + 0.05


@pytest.mark.parametrize(
    "max_num_seqs, max_model_len, max_blocks, expected",
    [(16, 512, 1000, (8, 64)), (2, 512, 1000, (2, 64)), (16, 512, 12, (2, 64)), (16, 20, 1000, (8, 18))],
)
def test_reference_shape_fits_the_limits(max_num_seqs, max_model_len, max_blocks, expected):
    shape = reference_step.reference_shape(max_num_seqs, max_model_len, 16, max_blocks)
    assert (shape.num_decode, shape.decode_context) == expected and shape.step_class == "decode"
    assert shape.num_blocks(16) <= max_blocks and shape.decode_context + 1 < max_model_len


def test_reference_step_is_timed_on_the_runner_and_leaves_its_pool_free():
    scenario = load_scenario("scenarios/cpu_tiny.yaml")
    runner = ModelRunner(scenario.model, scenario.dtype, "cpu", 64, 16)
    shape = reference_step.reference_shape(16, scenario.max_model_len, 16, 63)
    calls = []
    execute = runner.execute
    runner.execute = lambda scheduled: calls.append(len(scheduled)) or execute(scheduled)
    assert reference_step.ReferenceProbe(runner, shape).time() > 0
    assert calls == [shape.num_decode] * (sweep_timing.WARMUP_CALLS + reference_step.REFERENCE_REPEATS)


def test_a_probe_on_cpu_leaves_the_runs_kv_cache_alone():
    scenario = load_scenario("scenarios/cpu_tiny.yaml")
    runner = ModelRunner(scenario.model, scenario.dtype, "cpu", 64, 16)
    caches = runner.kv_caches
    before = [(k.clone(), v.clone()) for k, v in caches]
    probe = reference_step.ReferenceProbe(runner, reference_step.reference_shape(16, scenario.max_model_len, 16, 63))
    assert probe.own_cache and probe.time(repeats=2, warmup=1) > 0
    assert runner.kv_caches is caches  # swapped back
    for (k, v), (k0, v0) in zip(caches, before):
        assert torch.equal(k, k0) and torch.equal(v, v0)  # the probe wrote only into its own cache
    assert any(k.abs().sum() > 0 for k, _ in probe.kv_caches)
