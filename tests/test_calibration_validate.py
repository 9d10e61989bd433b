"""Held-out validation's pieces on tiny hand-made cases: the error table, the saturation flag, the held-out
scenarios themselves, the report and calibration.md, and the figures."""

import dataclasses

import numpy as np
import pytest

from planner.calibration import validate
from planner.calibration.defaults import default_scenario
from planner.calibration.machine_check import MachineCheck, machine_check
from planner.calibration.validation_report import METRICS, calibration_markdown, error_rows, report_lines, target_lines
from planner.outputs.plots.calibration import latency_cdfs, step_scatter


def summary(scale: float, blocks: int = 64) -> dict:
    s = {key: 10.0 * scale for key, _ in METRICS if key.endswith("_ms")}
    s |= {"request_throughput": 2.0 / scale, "output_throughput": 100.0 / scale}
    s["memory"] = {
        "num_gpu_blocks": blocks,
        "weights_bytes": 1000,
        "activation_bytes": 100,
        "block_bytes": 10,
        "non_torch_bytes": 0,
    }
    return s


def held_out(name: str, measured: float, calibrated: float, uncalibrated: float, flags=None) -> validate.HeldOutRun:
    lat = {"ttft": np.array([1.0, 2.0]), "tpot": np.array([0.5]), "e2el": np.array([3.0, 4.0])}
    measured_summary = summary(measured) | {"peak_memory_bytes": 2000}
    return validate.HeldOutRun(
        name,
        None,
        measured_summary,
        summary(calibrated),
        summary(uncalibrated),
        {"measured": lat, "calibrated": lat, "uncalibrated": lat},
        {},
        flags or {"measured": False, "calibrated": False, "uncalibrated": False},
        {"mean_tpot_ms": True, "mean_ttft_ms": False, "p99_itl_ms": None},
    )


def test_error_rows_are_predicted_minus_measured_over_measured():
    rows = {r["metric"]: r for r in error_rows(held_out("light", 1.0, 1.05, 2.0))}
    assert rows["mean_tpot_ms"]["calibrated_error"] == pytest.approx(0.05)
    assert rows["mean_tpot_ms"]["uncalibrated_error"] == pytest.approx(1.0)
    assert rows["output_throughput"]["calibrated_error"] == pytest.approx(1 / 1.05 - 1)
    assert rows["num_gpu_blocks"]["calibrated_error"] == 0
    # the simulator's peak: weights + activations + the whole pool
    assert rows["peak_memory_bytes"]["calibrated"] == 1000 + 100 + 64 * 10
    assert rows["peak_memory_bytes"]["measured"] == 2000


def test_report_and_markdown_show_both_ways_and_the_targets():
    runs = [
        held_out("light", 1.0, 1.05, 2.0),
        held_out("saturated", 1.0, 0.98, 1.5, {"measured": True, "calibrated": True, "uncalibrated": False}),
        held_out("closed", 1.0, 1.02, 1.7, {"measured": None, "calibrated": None, "uncalibrated": None}),
    ]
    lines = report_lines(runs, "cpu")
    text = "\n".join(lines)
    assert "+5.0% (+100.0%)" in text and "SATURATED (measured, calibrated)" in text and "closed loop" in text
    tpot = next(line for line in lines if line.strip().startswith("mean_tpot_ms"))
    assert "mean |error|   3.0%" in tpot and "worst   5.0%" in tpot and "met" in tpot and "MISSED" not in tpot
    assert "inside in 3 of 6 (scenario, statistic) pairs (50%)" in text
    markdown = calibration_markdown(runs, "cpu", ["header"], [])
    assert "| TPOT p99 | 10 | 10.5 | +5.0% | 20 | +100.0% |" in markdown
    assert markdown.count("### ") == 3


def test_saturation_flag_sees_a_growing_queue():
    arrivals = {"arrival_s": np.linspace(0, 10, 50)}
    start = np.linspace(0, 12, 200)
    steps = {"start_s": start, "duration_s": np.full(200, 0.06), "num_waiting": (start * 3).astype(int)}
    assert validate.saturated(arrivals, steps, open_loop=True) is True
    steps["num_waiting"] = (np.sin(start) > 0.9).astype(int)
    assert validate.saturated(arrivals, steps, open_loop=True) is False
    assert validate.saturated(arrivals, steps, open_loop=False) is None


def test_held_out_scenarios_differ_from_the_fitted_one_and_fit_its_limits():
    base = default_scenario("cpu", None)
    scenarios = dict(validate.held_out_scenarios(base, 20, capacity_rps=10.0))
    assert list(scenarios) == ["light", "saturated", "closed", "long", "preemption", "shared"]
    assert scenarios["light"].workload.arrival.rate == 3.0 and scenarios["saturated"].workload.arrival.rate == 20.0
    assert scenarios["closed"].workload.arrival.process == "closed"
    assert scenarios["preemption"].engine.num_gpu_blocks_override < base.engine.num_gpu_blocks_override
    assert scenarios["shared"].engine.enable_prefix_caching and scenarios["shared"].workload.shared_prefix.tokens > 0
    for scenario in scenarios.values():
        assert scenario.workload.num_requests == 20 and scenario.model == base.model
        assert scenario.workload.seed != base.workload.seed
        assert scenario.workload.prompt_tokens.high + scenario.workload.output_tokens.high <= base.max_model_len


def test_figures_are_written(tmp_path):
    lat = {"ttft": np.array([1.0, 2.0, 3.0]), "tpot": np.array([]), "e2el": np.array([4.0, 5.0])}
    ways = {"measured": lat, "calibrated": lat, "uncalibrated": lat}
    path = latency_cdfs(tmp_path / "cdf.png", [("light", ways), ("closed", ways)])
    assert path.stat().st_size > 10_000
    measured = np.array([0.001, 0.002, 0.004])
    path = step_scatter(tmp_path / "scatter.png", [("decode", measured, measured * 1.05)], "tiny")
    assert path.stat().st_size > 10_000


def test_coverage_is_measured_inside_the_interval():
    intervals = {"metrics": {"a": {"low": 1.0, "high": 2.0}, "b": {"low": 1.0, "high": 2.0}, "c": {"low": None}}}
    assert validate.coverage({"a": 1.5, "b": 2.5, "c": 1.0}, intervals) == {"a": True, "b": False, "c": None}


def test_machine_check_tells_a_busy_machine():
    assert machine_check({"reference_step_s": [0.0101, 0.0104], "cpu_share": 0.97}, 0.01, 1).clean
    slow = machine_check({"reference_step_s": [0.010, 0.014], "cpu_share": 0.97}, 0.01, 1)
    assert not slow.clean and slow.slowdown == pytest.approx(0.4) and "BUSY MACHINE" in slow.describe()
    descheduled = machine_check({"reference_step_s": [0.010, 0.010], "cpu_share": 0.5}, 0.01, 2)
    assert not descheduled.clean and "50%" in descheduled.describe() and "best of 2" in descheduled.describe()
    assert descheduled.badness > slow.badness
    on_cuda = machine_check({"reference_step_s": [0.02, 0.02], "cpu_share": None}, 0.02, 1)
    assert on_cuda.clean and on_cuda.cpu_share is None
    assert machine_check({}, None, 1).clean  # nothing measured: nothing to flag
    crowded = machine_check({"reference_step_s": [0.01, 0.01], "cpu_share": 1.0, "other_cpu_load": 0.8}, 0.01, 1)
    assert not crowded.clean and "other processes kept 0.80 CPUs busy" in crowded.describe()
    assert machine_check({"reference_step_s": [0.01], "cpu_share": 1.0, "other_cpu_load": 0.05}, 0.01, 1).clean


def test_a_run_on_a_busy_machine_is_run_again_and_the_cleanest_kept(monkeypatch):
    """run_held_out re-runs a held-out scenario while the reference step is slower than at the sweep, keeps
    the cleanest run, and flags it when every attempt was busy."""
    from gpu_engine import engine

    real = engine.run_scenario
    slowdowns = iter([1.5, 1.3, 1.0] + [1.0] * 4 + [1.4] * validate.MAX_ATTEMPTS)  # light: third try clean; last: never
    seen = []

    def run_scenario(scenario, device, reference=None):
        result = real(scenario, device, reference=reference)
        before, after = result.extra["reference_step_s"]  # the real engine timed the reference around the run
        assert all(t > 0 for t in result.extra["reference_during_s"])  # and during it, on CPU
        assert before > 0 and after > 0 and 0 < result.extra["cpu_share"] <= 1.0
        factor = next(slowdowns)
        seen.append(factor)
        result.extra["reference_step_s"] = [0.01 * factor, 0.01 * factor]
        result.extra["cpu_share"], result.extra["other_cpu_load"] = 0.95, 0.0
        result.extra["reference_during_s"] = [0.01 * factor]
        return result

    monkeypatch.setattr(engine, "run_scenario", run_scenario)
    base = default_scenario("cpu", None)
    base = dataclasses.replace(base, engine=dataclasses.replace(base.engine, num_gpu_blocks_override=64))
    from gpu_engine.reference_step import reference_shape
    from sim.cost_coefficients import CostCoefficients

    shape = reference_shape(base.engine.max_num_seqs, base.max_model_len, base.engine.block_size, 63)
    runs = validate.run_held_out(base, CostCoefficients(), "cpu", 6, interval_runs=0, reference=(shape, 0.01))
    assert len(seen) == 3 + 4 + validate.MAX_ATTEMPTS  # light ran three times, the last scenario every time
    light, last = runs[0], runs[-1]
    assert light.machine.clean and light.machine.attempts == 3
    assert not last.machine.clean and last.machine.attempts == validate.MAX_ATTEMPTS
    assert last.machine.slowdown == pytest.approx(0.4)
    text = "\n".join(report_lines(runs, "cpu"))
    assert "BUSY MACHINE" in text and "Machine check: 5 of 6 live runs ran as fast as the sweep" in text


def test_the_probes_during_a_run_count_in_the_machine_check():
    quiet_around = {"reference_step_s": [0.010, 0.010], "cpu_share": 1.0, "other_cpu_load": 0.0}
    assert machine_check(quiet_around | {"reference_during_s": [0.010, 0.011, 0.0105]}, 0.01, 1).clean
    slow_inside = machine_check(quiet_around | {"reference_during_s": [0.013, 0.014, 0.010]}, 0.01, 1)
    assert not slow_inside.clean and slow_inside.slowdown == pytest.approx(0.3)  # the median of the probes


def test_targets_are_judged_on_the_runs_as_fast_as_the_sweep():
    busy = MachineCheck(0.3, 1.0, 3, 0.0)
    quiet = MachineCheck(0.02, 1.0, 1, 0.0)
    runs = [held_out("a", 1.0, 1.05, 2.0), held_out("b", 1.0, 0.97, 2.0), held_out("c", 1.0, 0.6, 2.0)]
    for run, machine in zip(runs, (quiet, quiet, busy)):
        run.machine = machine
    line = next(x for x in target_lines(runs, "cpu") if "mean_tpot_ms" in x)
    assert "over the 2 runs as fast as the sweep" in line and "(worst   5.0%)" in line and line.endswith("met")
    assert "all 3: mean" in line and "worst 40.0%" in line  # every run's figure beside
    runs[1].machine = busy  # one clean run of three: too few to judge
    lines = target_lines(runs, "cpu")
    assert "over the 1 runs as fast as the sweep" in lines[0] and lines[0].endswith("NOT JUDGED")
    assert "only 1 of 3 runs ran as fast as the sweep" in lines[-1]
    for run in runs:
        run.machine = busy
    lines = target_lines(runs, "cpu")
    assert "over all 3 runs" in lines[0] and lines[0].endswith("NOT JUDGED") and "only 0 of 3" in lines[-1]
