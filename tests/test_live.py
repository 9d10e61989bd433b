"""`planner run`: the scenario on the live engine, writing what `planner simulate` writes."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, cuda_available, needs_torch

from planner.cli import main


def request_lengths(folder: Path) -> list[tuple[str, str, str]]:
    with open(folder / "requests.csv") as f:
        return [(row["request_id"], row["prompt_tokens"], row["output_tokens"]) for row in csv.DictReader(f)]


def check_run(run: Path, sim: Path, measured: dict, simulated: dict, capsys) -> None:
    assert measured["mode"] == "measured" and simulated["mode"] == "simulated"
    assert measured["completed"] == simulated["completed"] == 48
    # Same scenario and seed: the same requests in both modes.
    assert request_lengths(run) == request_lengths(sim)
    assert measured["memory"]["num_gpu_blocks"] == 64 and measured["peak_memory_bytes"] > 0
    steps = (run / "steps.csv").read_text().splitlines()
    assert steps[0].startswith("start_s,duration_s,num_running") and len(steps) > 48
    capsys.readouterr()
    assert main(["compare", str(sim), str(run)]) == 0
    table = capsys.readouterr().out
    assert "(simulated)" in table and "(measured)" in table and "num_gpu_blocks" in table


def simulated(tmp_path: Path, capsys) -> dict:
    capsys.readouterr()
    assert main(["simulate", "scenarios/cpu_tiny.yaml", "--out", str(tmp_path / "sim"), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cpu_tiny_runs_on_the_cpu_and_compares(cpu_tiny_run, tmp_path, capsys):
    assert cpu_tiny_run.summary["device_name"] == "cpu"
    check_run(cpu_tiny_run.folder, tmp_path / "sim", cpu_tiny_run.summary, simulated(tmp_path, capsys), capsys)


@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU; the CPU twin above runs everywhere")
def test_cpu_tiny_runs_on_cuda_and_compares(tmp_path, capsys):
    assert main(["run", "scenarios/cpu_tiny.yaml", "--device", "cuda", "--out", str(tmp_path / "run"), "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)
    check_run(tmp_path / "run", tmp_path / "sim", measured, simulated(tmp_path, capsys), capsys)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--model-path", "/nonexistent/dir"], ["--model-path", "/nonexistent/dir"]),
        (["--set", "hardware.replicas=2"], ["replicas"]),
        (["--set", "engine.kv_cache_dtype=fp8"], ["kv_cache_dtype", "fp8", "auto"]),
        # its steps would record the padded batch it never computed (45% more tokens than were run)
        (["--set", "engine.scheduler=static"], ["engine.scheduler static", "simulated only", "continuous"]),
    ],
)
@needs_torch  # without it the command says to install the engine extra
def test_run_refuses_clearly(args, words):
    result = subprocess.run(
        [sys.executable, "-m", "planner.cli", "run", "scenarios/cpu_tiny.yaml", "--device", "cpu", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr


@needs_torch
def test_a_run_says_its_steps_are_serial_where_the_simulator_overlaps_them(tmp_path, capsys):
    # cpu_tiny is eager (serial on both sides): no note. On a GPU of the catalog with vLLM's defaults the simulator
    # overlaps host and device (async scheduling), which this engine does not: the run says so.
    base = ["run", "scenarios/cpu_tiny.yaml", "--device", "cpu", "--set", "workload.num_requests=4"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    assert "Steps: this engine runs them serially" not in capsys.readouterr().out
    overlapped = ["--set", "hardware.gpu=a10", "--set", "engine.enforce_eager=false"]
    assert main([*base, *overlapped, "--out", str(tmp_path / "b")]) == 0
    assert "Steps: this engine runs them serially" in capsys.readouterr().out
