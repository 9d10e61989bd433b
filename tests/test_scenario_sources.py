"""What a scenario loads from elsewhere: the scenario file itself, trace files, model folders (paths resolved
against the scenario's folder), and model and GPU specs written inline."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.scenario_files import INLINE_GPU, INLINE_MODEL, MINIMAL, RATE, load_error, write

from planner.scenario.load import load_scenario


def test_missing_scenario_file(tmp_path):
    assert load_error(tmp_path / "nope.yaml") == f"{tmp_path / 'nope.yaml'}: no such scenario file"


def test_missing_trace_file_names_key_and_resolved_path(tmp_path):
    path = write(tmp_path, MINIMAL, "sub/s.yaml")
    message = load_error(path, ("workload.prompt_tokens.dist=trace", "workload.trace.path=traces/none.csv"))
    resolved = tmp_path / "sub" / "traces" / "none.csv"
    assert message == (
        f'{path}: workload.trace.path = "traces/none.csv": no such file: {resolved}; expected a CSV or JSONL trace file'
    )
    for bad, what in (("/dev/null", "not a regular file"), (str(tmp_path), "a folder")):
        message = load_error(path, ("workload.prompt_tokens.dist=trace", f"workload.trace.path={bad}"))
        assert message == f'{path}: workload.trace.path = "{bad}": {what}: {bad}; expected a CSV or JSONL trace file'


def test_a_path_naming_a_user_this_machine_lacks_is_an_error_not_a_traceback(tmp_path, monkeypatch, capsys):
    """Path.expanduser raises RuntimeError for `~name` of no such user: every path a user gives says so."""
    from planner.calibration.resolve import resolve_cost_model
    from planner.calibration.shipped import default_profile_dir
    from planner.errors import NO_SUCH_USER, PlannerError

    user = "~no-such-user-planner"
    path = write(tmp_path, MINIMAL)
    assert load_error(path, (f"model={user}/config.json",)) == f'{path}: model = "{user}/config.json": {NO_SUCH_USER}'
    message = load_error(path, ("workload.prompt_tokens.dist=trace", f"workload.trace.path={user}/t.csv"))
    assert message == f'{path}: workload.trace.path = "{user}/t.csv": {NO_SUCH_USER}'
    scenario = load_scenario(path)
    with pytest.raises(PlannerError, match=f'^--calibration "{user}/p.yaml": {NO_SUCH_USER}$'):
        resolve_cost_model(scenario, f"{user}/p.yaml")
    with pytest.raises(PlannerError, match=f'calibration = "{user}/p.yaml": {NO_SUCH_USER}$'):
        resolve_cost_model(load_scenario(path, (f"calibration={user}/p.yaml",)), None)
    monkeypatch.setenv("PLANNER_PROFILE_DIR", f"{user}/profiles")
    with pytest.raises(PlannerError, match=f'^environment variable PLANNER_PROFILE_DIR = "{user}/profiles": '):
        default_profile_dir()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"num_hidden_layers": 10**12}, "num_hidden_layers = 1000000000000: must be in [1, 1,024]"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": float("nan")}}, "factor = 'NaN': must be a positive, finite"),
        ({"rope_scaling": {"rope_type": "linear", "factor": -5}}, "factor = -5: must be a positive, finite number"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": "abc"}}, "factor = 'abc': must be a number"),
        ({"rope_scaling": {"rope_type": "linear"}}, "rope_scaling linear lacks factor"),
        ({"rope_theta": float("inf")}, "rope_theta = 'Infinity': must be a positive"),
    ],
)
def test_an_inline_model_s_counts_and_factors_are_checked_before_use(tmp_path, change, expected):
    """10^12 layers once built a tuple per layer before the range check (out of memory); a yarn or linear
    rope factor was passed through unchecked and a NaN one reached summary.json as null. (JSON's NaN and
    Infinity reach the catalog as strings that float() reads.)"""
    path = write(tmp_path, MINIMAL)
    message = load_error(path, (f"model={json.dumps({**INLINE_MODEL, **change})}",))
    assert message.startswith(f"{path}: model: model 'inline': ") and expected in message


def test_trace_columns_and_use_are_checked(tmp_path):
    (tmp_path / "t.csv").write_text("num_prefill_tokens, num_decode_tokens\n10,5\n")  # header spaces: stripped
    path = write(tmp_path, MINIMAL + "  trace: {path: t.csv}\n")
    assert "workload.trace: is set but unused" in load_error(path)
    message = load_error(path, ("workload.arrival.process=trace",))
    assert 'workload.trace.arrival_column = "arrived_at": no such column' in message
    assert "columns: num_prefill_tokens, num_decode_tokens" in message
    message = load_error(path, ("workload.prompt_tokens.dist=trace", "workload.trace.prompt_column=num_prefil_tokens"))
    assert "(did you mean num_prefill_tokens?)" in message
    s = load_scenario(path, ("workload.prompt_tokens.dist=trace", "workload.output_tokens.dist=trace"))
    assert s.workload.trace.path == str(tmp_path / "t.csv")


def test_shipped_trace_loads(tmp_path):
    trace = Path(__file__).resolve().parent.parent / "scenarios" / "traces" / "azure_conv_2023.csv"
    path = write(
        tmp_path,
        "model: qwen-7b\nhardware: {gpu: a10}\n"
        "workload: {arrival: {process: trace}, prompt_tokens: {dist: trace}, output_tokens: {dist: trace},"
        f" trace: {{path: {trace}}}}}\n",
    )
    assert load_scenario(path).workload.trace.arrival_column == "arrived_at"


def test_relative_paths_resolve_against_the_scenario_folder(tmp_path, monkeypatch):
    folder = tmp_path / "scen"
    (folder / "models" / "m").mkdir(parents=True)
    (folder / "models" / "m" / "config.json").write_text(json.dumps(INLINE_MODEL))
    (folder / "t.csv").write_text("num_prefill_tokens,num_decode_tokens\n10,5\n")
    path = write(
        folder,
        """\
        model: models/m
        hardware: {gpu: a10}
        workload: {arrival: {rate: 1}, prompt_tokens: {dist: trace}, trace: {path: t.csv}}
        """,
    )
    monkeypatch.chdir(tmp_path)  # somewhere else: paths must not depend on the working directory
    s = load_scenario(os.path.relpath(path))
    assert s.model.hidden_size == 768 and s.model.num_key_value_heads == 4
    assert s.workload.trace.path == str(folder / "t.csv")
    assert load_scenario(path, ("model=models/m/config.json",)).model.hidden_size == 768


def test_inline_model_and_gpu(tmp_path):
    path = write(
        tmp_path,
        f"model: {json.dumps({'name': 'mini', **INLINE_MODEL})}\n"
        f"hardware: {{gpu: {json.dumps({'name': 'mygpu', **INLINE_GPU})}}}\n" + RATE,
    )
    s = load_scenario(path)
    assert s.model.name == "mini" and s.model.hidden_size == 768 and s.model.head_dim == 64
    assert s.hardware.gpu.name == "mygpu" and s.hardware.gpu.memory_bytes == 24_000_000_000
    assert s.hardware.gpu.fp8_tflops is None
    assert s.engine.max_model_len == 2048  # the inline model's max_position_embeddings
    # their own errors come back naming the key
    bad_model = {k: v for k, v in INLINE_MODEL.items() if k != "hidden_size"}
    message = load_error(path, (f"model={json.dumps(bad_model)}",))
    assert message.startswith(f"{path}: model: ") and "hidden_size" in message
    message = load_error(path, ("hardware.gpu.memory_bytes=-1",))
    assert message.startswith(f"{path}: hardware.gpu: ") and "memory_bytes" in message


def test_an_inline_model_s_optional_parts_have_ranges(tmp_path):
    """10^20 experts was read, and failed later as 'short by 4.2e39 GiB'."""
    path = write(tmp_path, MINIMAL)
    moe = {**INLINE_MODEL, "model_type": "qwen3_moe", "moe_intermediate_size": 768, "num_experts_per_tok": 8}
    message = load_error(path, (f"model={json.dumps({**moe, 'num_experts': 10**20})}",))
    assert message == f"{path}: model.num_experts = {10**20}: must be in [0, 65,536]"
    window = {**INLINE_MODEL, "model_type": "mistral", "sliding_window": 10**11}
    message = load_error(path, (f"model={json.dumps(window)}",))
    assert message == f"{path}: model.sliding_window = {10**11}: must be in [1, 16,777,216] tokens"
