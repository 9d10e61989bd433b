"""Edited run folders given to `planner compare` and `planner calibrate --from`: each is refused with one line
naming the file, the key or column, the value and what is allowed (exit 2, no traceback), and what compare
prints stays one valid table or one valid JSON document."""

import json
import shutil

import pytest
from helpers import error_of

from planner.cli import main

# Its module-scoped fixture is computed once per pytest-xdist worker: every test of the module on one worker.
pytestmark = pytest.mark.xdist_group("test_compare_fit_input")


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sim") / "a"
    assert main(["simulate", "scenarios/cpu_tiny.yaml", "--set", "workload.num_requests=20", "--out", str(folder)]) == 0
    return json.loads((folder / "summary.json").read_text())


def write_summary(folder, summary: dict | str):
    folder.mkdir()
    (folder / "summary.json").write_text(summary if isinstance(summary, str) else json.dumps(summary))
    return folder


# --- compare ---


def test_compare_refuses_an_integer_no_float_holds(simulated, tmp_path, capsys):
    a = write_summary(tmp_path / "a", simulated)
    text = json.dumps(simulated).replace(
        f'"mean_ttft_ms": {simulated["mean_ttft_ms"]}', '"mean_ttft_ms": 1' + "0" * 400
    )
    b = write_summary(tmp_path / "b", text)
    err = error_of(["compare", str(a), str(b)], capsys)
    assert f"{b / 'summary.json'}: mean_ttft_ms = 1000" in err and "...: must be a finite number or null" in err


def test_compare_refuses_a_negative_latency(simulated, tmp_path, capsys):
    a = write_summary(tmp_path / "a", simulated)
    b = write_summary(tmp_path / "b", simulated | {"p99_ttft_ms": -5})
    err = error_of(["compare", str(a), str(b)], capsys)
    assert f"{b / 'summary.json'}: p99_ttft_ms = -5: must be >= 0 or null" in err


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ({"memory": "x"}, 'memory = "x": must be an object'),
        ({"memory": None}, "memory = null: must be an object"),
        ({"mode": 5}, "mode = 5: must be a string"),
        ({"scenario": 5}, "scenario = 5: must be an object"),  # its keys are compared: 'int' has no items()
        ({"scenario": [1, 2]}, "scenario = [1, 2]: must be an object"),
    ],
)
def test_compare_refuses_memory_mode_or_scenario_of_another_type(simulated, tmp_path, capsys, edit, words):
    a = write_summary(tmp_path / "a", simulated)
    b = write_summary(tmp_path / "b", simulated | edit)
    assert f"{b / 'summary.json'}: {words}" in error_of(["compare", str(a), str(b)], capsys)


def strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(("a_ttft", "b_ttft"), [(1.0, 1e308), (1e-320, 2.0), (0, 2.0)])
def test_compare_has_no_percentage_of_a_baseline_too_small_or_too_far(simulated, tmp_path, capsys, a_ttft, b_ttft):
    a = write_summary(tmp_path / "a", simulated | {"mean_ttft_ms": a_ttft})
    b = write_summary(tmp_path / "b", simulated | {"mean_ttft_ms": b_ttft})
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "inf" not in out and "nan" not in out
    (row,) = [line for line in out.splitlines() if line.startswith("TTFT mean (ms)")]
    assert row.split()[-1] == "-"  # as for a zero baseline
    assert main(["compare", str(a), str(b), "--json"]) == 0
    rows = strict_json(capsys.readouterr().out)["rows"]
    (row,) = [r for r in rows if r["metric"] == "mean_ttft_ms"]
    assert row["diff_percent"] is None and row["b"] == b_ttft


def test_compare_prints_a_mode_of_control_characters_on_one_line(simulated, tmp_path, capsys):
    a = write_summary(tmp_path / "a", simulated)
    b = write_summary(tmp_path / "b", simulated | {"mode": "sim\nulated\x1b[31m"})
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "\x1b" not in "".join(lines) and r"b (sim\nulated\x1b[31m)" in lines[0]
    assert main(["compare", str(a), str(b), "--json"]) == 0
    assert len(lines) == 1 + len(strict_json(capsys.readouterr().out)["rows"])  # a header line, a line per row


# --- calibrate --from ---


@pytest.fixture
def run_dir(cpu_tiny_run):
    return cpu_tiny_run.folder


def edited_run(run_dir, tmp_path, steps=None, scenario=None):
    """A copy of the run folder; steps(header, rows) -> rows, or the scenario's keys replaced."""
    folder = tmp_path / "edited"
    shutil.copytree(run_dir, folder)
    if steps is not None:
        header, *rows = (folder / "steps.csv").read_text().splitlines()
        names = header.split(",")
        (folder / "steps.csv").write_text("\n".join([header, *steps(names, [r.split(",") for r in rows])]) + "\n")
    if scenario is not None:
        summary = json.loads((folder / "summary.json").read_text())
        summary["scenario"] |= scenario
        (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def with_values(values: dict[str, str]):
    def edit(names, rows):
        for row in rows:
            for name, value in values.items():
                row[names.index(name)] = value
        return [",".join(row) for row in rows]

    return edit


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (
            {"duration_s": "0", "host_s": "0", "device_s": "0"},
            "row 1, duration_s = 0: must be a number of seconds in [1e-06, 3600]",
        ),
        ({"device_s": "1e-300"}, "row 1, device_s = 1e-300: must be 0 or a number of seconds in [1e-06, 3600]"),
        ({"duration_s": "1e300"}, "row 1, duration_s = 1e+300: must be a number of seconds in [1e-06, 3600]"),
        ({"num_steps": "5"}, "row 1, num_steps = 5: must be 1 (calibrate fits single steps"),
        ({"attention_pairs": "1e300"}, "row 1, attention_pairs = 1e+300: must be a whole number from 0 to "),
        ({"num_sampled": "x"}, "row 1, num_sampled = empty or not a number: must be a whole number"),
    ],
)
def test_from_refuses_steps_the_fit_cannot_use(run_dir, tmp_path, capsys, values, words):
    folder = edited_run(run_dir, tmp_path, steps=with_values(values))
    err = error_of(["calibrate", "--from", str(folder), "--out", str(tmp_path / "p.yaml")], capsys)
    assert f"{folder / 'steps.csv'}: {words}" in err and not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(
    ("scenario", "words"),
    [
        ({"model": 5}, "scenario.model = 5: must be an object"),
        ({"hardware": {"tensor_parallel_size": 1}}, "scenario.hardware.gpu is missing: must be an object"),
    ],
)
def test_from_refuses_a_scenario_section_that_is_no_object(run_dir, tmp_path, capsys, scenario, words):
    folder = edited_run(run_dir, tmp_path, scenario=scenario)
    err = error_of(["calibrate", "--from", str(folder), "--out", str(tmp_path / "p.yaml")], capsys)
    assert f"{folder / 'summary.json'}: {words}" in err


def _with(section: str, **values):
    """A scenario edit: the run's resolved `section` (model, hardware, engine) with these values."""

    def edit(summary_scenario: dict) -> dict:
        return {section: summary_scenario[section] | values}

    return edit


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda s: {"dtype": "float8"}, 'scenario.dtype = "float8": must be one of bfloat16, float16, float32'),
        (_with("engine", kv_cache_dtype="foo"), 'scenario.engine.kv_cache_dtype = "foo": must be one of auto'),
        (_with("engine", block_size=0), "scenario.engine.block_size = 0: must be a power of two"),
        (_with("model", num_hidden_layers=0), "scenario.model.num_hidden_layers = 0: must be in [1, "),
        (_with("model", hidden_size="x"), 'scenario.model.hidden_size = "x": expected an integer'),
        (_with("hardware", tensor_parallel_size=0), "scenario.hardware.tensor_parallel_size = 0: must be in [1, 64]"),
    ],
)
def test_from_checks_the_resolved_scenario_as_a_scenario_file(run_dir, tmp_path, capsys, edit, words):
    # An edited summary is input too: these made the fit divide by zero or fail on a missing dtype (tracebacks),
    # or wrote a profile from a model of no layers.
    recorded = json.loads((run_dir / "summary.json").read_text())["scenario"]
    folder = edited_run(run_dir, tmp_path, scenario=edit(recorded))
    err = error_of(["calibrate", "--from", str(folder), "--out", str(tmp_path / "p.yaml")], capsys)
    assert f"{folder / 'summary.json'}: {words}" in err and not (tmp_path / "p.yaml").exists()


def test_from_refuses_a_steps_column_named_twice(run_dir, tmp_path, capsys):
    folder = edited_run(run_dir, tmp_path)
    steps = folder / "steps.csv"  # num_steps's header becomes a second duration_s: numpy read it as duration_s_1
    steps.write_text(steps.read_text().replace("num_steps", "duration_s", 1))
    err = error_of(["calibrate", "--from", str(folder), "--out", str(tmp_path / "p.yaml")], capsys)
    assert f"{steps}: line 1: the column duration_s is named twice: not a steps.csv" in err


def test_from_refuses_too_few_steps_to_fit(run_dir, tmp_path, capsys):
    folder = edited_run(run_dir, tmp_path, steps=lambda names, rows: [",".join(rows[0])])
    err = error_of(["calibrate", "--from", str(folder), "--out", str(tmp_path / "p.yaml")], capsys)
    assert f"{folder / 'steps.csv'}: 1 step rows (0 decode, 1 with prompt tokens)" in err
    assert "fitting 7 coefficients needs at least 35 rows, 5 of each kind" in err
    assert not (tmp_path / "p.yaml").exists()
