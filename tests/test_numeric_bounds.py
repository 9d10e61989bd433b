"""Numbers that would make a step take no finite time (a GPU rate of ~0, a coefficient of 1e308, a fit error
of 1e300), profile files that would crash the reader, and the profile folder: each is one clear line naming
the file or variable, the field, the value and what is allowed, exit 2, no traceback."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from helpers import error_of
from helpers.scenarios import make_scenario

import planner.calibration.resolve
import planner.scenario.yaml_loader
from planner.calibration.profile_loader import load_profile
from planner.calibration.provenance import SPEC_SHEET
from planner.calibration.shipped import PROFILE_DIR, default_profile_dir, profile_path, profiled_pairs
from planner.errors import show_value
from planner.scenario.rules import is_percentile_key
from sim.cost_coefficients import CostCoefficients
from sim.cost_model import CostModel
from sim.engine_facts import EngineFacts
from sim.errors import StepTimeError, WorkloadError

A10 = str(Path(__file__).resolve().parent.parent / "scenarios" / "a10_qwen7b.yaml")
ON_A40 = ["--set", "hardware.gpu=a40", "--set", "dtype=float16", "--set", "workload.num_requests=5"]


def a40_profile(tmp_path: Path, section: str, key: str, value) -> Path:
    """The shipped A40 profile with one field of one section changed."""
    data = yaml.safe_load((PROFILE_DIR / "a40-tp1.yaml").read_text())
    data[section][key] = value
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("memory_bandwidth_gbps", 1e-300, "must be in [1, 1e+06] GB/s"),
        ("bf16_tflops", 1e-300, "must be in [0.01, 100000] TFLOPS"),
        ("fp8_tflops", 5e-324, "must be in [0.01, 100000] TFLOPS"),
        ("interconnect_bandwidth_gbps", 1e-300, "must be in [0.1, 1e+06] GB/s"),
    ],
)
def test_a_gpu_rate_near_zero_is_refused_with_its_range(field, value, allowed, capsys):
    gpu = {"memory_bytes": 1 << 40, "bf16_tflops": 125, "memory_bandwidth_gbps": 900, field: value}
    err = error_of(["simulate", A10, "--set", "workload.num_requests=5", "--set", f"hardware.gpu={gpu}"], capsys)
    assert f"a10_qwen7b.yaml: hardware.gpu.{field} = {show_value(value)}: {allowed}" in err


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("launch_overhead_per_layer_s", 1e308, "an overhead or latency must be in [0, 10] seconds"),
        ("step_overhead_s", 1e300, "an overhead or latency must be in [0, 10] seconds"),
        ("per_row_overhead_s", 11.0, "an overhead or latency must be in [0, 10] seconds"),
        ("allreduce_latency_s", 1e300, "an overhead or latency must be in [0, 10] seconds"),
        ("flops_efficiency", 5e-324, "an efficiency must be in (0, 1] and >= 0.0001"),
        ("bandwidth_efficiency", 5e-324, "an efficiency must be in (0, 1] and >= 0.0001"),
    ],
)
def test_a_profile_coefficient_outside_any_real_range_is_refused(tmp_path, capsys, name, value, allowed):
    path = a40_profile(tmp_path, "coefficients", name, value)
    err = error_of(["simulate", A10, *ON_A40, "--calibration", str(path)], capsys)
    assert f"{path}: calibration profile: coefficients.{name} = {show_value(value)}: {allowed}" in err


def test_every_shipped_profile_is_within_the_bounds():
    # one profile per (GPU, tensor parallel) pair the public operator data measured, and no other: Vidur's
    # operators, and LLMServingSim's bundles
    with open(PROFILE_DIR / "vidur" / "operators.csv") as f:
        vidur = {(row["gpu"], int(row["tensor_parallel_size"])) for row in csv.DictReader(f)}
    paths = sorted(PROFILE_DIR.glob("*.yaml"))
    assert {path.name for path in paths} == {profile_path(gpu, tp).name for gpu, tp in profiled_pairs()}
    assert vidur <= set(profiled_pairs())
    for path in paths:
        load_profile(path)


@pytest.mark.parametrize(
    ("coefficients", "words"),
    [
        (CostCoefficients(launch_overhead_per_layer_s=1e308), "takes inf s"),
        (CostCoefficients(flops_efficiency=0.0), "compute at 0 flop/s"),  # was a ZeroDivisionError
    ],
)
def test_a_cost_model_without_a_finite_step_time_is_refused_at_construction(coefficients, words):
    with pytest.raises(StepTimeError) as e:
        CostModel(EngineFacts.of(make_scenario()), coefficients)
    assert isinstance(e.value, WorkloadError)  # what the CLI reports as one line
    assert "no finite step time" in str(e.value) and words in str(e.value)


def test_the_cli_reports_a_cost_model_without_a_finite_step_time_as_one_line(monkeypatch, capsys):
    # The profile and scenario checks stop such numbers first: this is the simulator's own last defence.
    bad = CostCoefficients(step_overhead_s=1e308, launch_overhead_per_layer_s=1e308)
    monkeypatch.setattr(planner.calibration.resolve, "resolve_cost_model", lambda *a, **k: (bad, SPEC_SHEET))
    err = error_of(["simulate", A10, "--set", "workload.num_requests=5"], capsys)
    assert "no finite step time" in err and "launch_overhead_per_layer_s 1e+308" in err


@pytest.mark.parametrize(
    ("key", "value", "shown", "allowed"),
    [
        ("median_abs_error", 1e300, "fit.median_abs_error = 1e+300", "expected a relative error in [0, 10]"),
        ("p90_abs_error", float("nan"), "fit.p90_abs_error = .nan", "expected a relative error in [0, 10]"),
        ("rows", -1, "fit.rows = -1", "expected an integer >= 0"),
        ("by_class", {"layer": {"median": -0.1}}, "fit.by_class.layer.median = -0.1", "a relative error in [0, 10]"),
        ("by_class", {"layer": {"mean": 0.1}}, "fit.by_class.layer.mean", "unknown key; allowed: rows, median, p90"),
        ("worst", 1, "fit.worst", "unknown key; allowed: rows, median_abs_error, p90_abs_error, by_class"),
    ],
)
def test_a_profile_fit_is_checked_before_intervals_draw_from_it(tmp_path, capsys, key, value, shown, allowed):
    path = a40_profile(tmp_path, "fit", key, value)
    err = error_of(["simulate", A10, *ON_A40, "--calibration", str(path), "--intervals", "3"], capsys)
    assert f"{path}: calibration profile: {shown}" in err and allowed in err


@pytest.mark.parametrize("pure_python", [False, True])
def test_a_deeply_nested_profile_is_one_clear_error(tmp_path, monkeypatch, capsys, pure_python):
    if pure_python:  # PyYAML without libyaml recurses once per level
        monkeypatch.setattr(planner.scenario.yaml_loader, "_PACKAGED_LOADER", yaml.SafeLoader)
    folder = tmp_path / "profiles"
    folder.mkdir()
    path = folder / "x.yaml"
    path.write_text("a:" + " [" * 100_000 + "\n")
    monkeypatch.setenv("PLANNER_PROFILE_DIR", str(folder))
    # calibration: auto (the default) reads every profile in the folder: a bad one is named, as any bad profile is
    err = error_of(["simulate", A10, "--set", "workload.num_requests=5"], capsys)
    assert f"{path}: calibration profile: " in err and "invalid YAML" in err
    assert error_of(["simulate", A10, "--calibration", str(path)], capsys) == err


def test_invalid_yaml_in_a_profile_is_one_clean_line(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("coefficients: [\n")
    err = error_of(["simulate", A10, "--calibration", str(path)], capsys)
    assert f"{path}: calibration profile: line 2, column 1: invalid YAML: while parsing a flow node; " in err
    assert "\\n" not in err and "<unicode string>" not in err


def test_a_profile_folder_that_is_a_file_is_refused(tmp_path, monkeypatch, capsys):
    path = tmp_path / "profiles.yaml"
    path.write_text("")
    monkeypatch.setenv("PLANNER_PROFILE_DIR", str(path))
    err = error_of(["simulate", A10, "--set", "workload.num_requests=5"], capsys)
    # the variable's value as messages show a value (cut at 80 characters: a pytest-xdist worker's tmp_path is long)
    assert f"environment variable PLANNER_PROFILE_DIR = {show_value(str(path))}: {path} is not a folder" in err
    assert "expected the folder of your calibration profiles" in err
    monkeypatch.setenv("PLANNER_PROFILE_DIR", str(tmp_path / "not yet"))  # nothing saved yet: fine
    assert default_profile_dir() == tmp_path / "not yet"


def test_percentile_keys_take_ascii_digits_only(capsys):
    assert is_percentile_key("p99") and is_percentile_key("p99.9")
    assert not is_percentile_key("p٩٩") and not is_percentile_key("p９９")
    err = error_of(["simulate", A10, "--set", "slo.ttft_ms={p٩٩: 500}"], capsys)
    assert "slo.ttft_ms.p٩٩: unknown statistic" in err and "allowed: mean or pNN" in err
