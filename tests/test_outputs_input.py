"""Bad input around a run's files: a malformed checkpoint index, a FIFO for a tensor file, an --out folder
another process is writing, and --intervals runs that rejected every request."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from gpu_engine.model import build_model
from gpu_engine.weights import WeightLoadError, load_weights
from planner.cli import main
from planner.outputs.out_lock import LOCK_NAME
from tests.test_engine_weights import LLAMA

TINY = dataclasses.replace(LLAMA, num_hidden_layers=1)  # one layer: the weights tests' model, smaller
INDEX = "model.safetensors.index.json"
# 3 of workload seeds 3..7 draw both requests' prompts beyond max_model_len 4096: every request is rejected
REJECTING = [
    "simulate",
    "scenarios/a10_qwen7b.yaml",
    "--set",
    "workload.num_requests=2",
    "--set",
    "workload.seed=3",
    "--set",
    "workload.prompt_tokens={dist: uniform, low: 3500, high: 5000}",
]


def load(path):
    load_weights(build_model(TINY, torch.float32, "cpu"), path)


@pytest.mark.parametrize(
    "index, words",
    [
        ("[1,2]", "found [1, 2]"),
        ('{"weight_map": [1,2]}', 'found {"weight_map": [1, 2]}'),
        ('{"weight_map": {"a": 5}}', 'weight_map maps "a" to 5'),
        ('{"weight_map": {"a": "../x.safetensors"}}', 'weight_map maps "a" to "../x.safetensors"'),
        ('{"weight_map": {"a": "/tmp/x.safetensors"}}', 'weight_map maps "a" to "/tmp/x.safetensors"'),
        ("[" * 100_000, "not JSON"),
        (None, "not a regular file"),  # a folder of that name
    ],
)
def test_a_malformed_index_is_one_clear_error(tmp_path, index, words):
    if index is None:
        (tmp_path / INDEX).mkdir()
    else:
        (tmp_path / INDEX).write_text(index)
    with pytest.raises(WeightLoadError) as err:
        load(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / INDEX}: ") and words in message
    assert "weight_map maps tensor names to .safetensors file names in its folder" in message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("indexed", [False, True])
def test_a_fifo_for_a_tensor_file_is_refused_before_opening(tmp_path, indexed):
    fifo = tmp_path / ("x.safetensors" if indexed else "model.safetensors")
    os.mkfifo(fifo)
    if indexed:
        (tmp_path / INDEX).write_text(json.dumps({"weight_map": {"a": "x.safetensors"}}))
    # in a process of its own: opening the FIFO blocks without releasing the GIL, so no thread could time it out
    code = f"from tests.test_outputs_input import load\nload({str(tmp_path)!r})"
    try:
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"load_weights blocked on the FIFO {fifo}")
    assert f"WeightLoadError: {fifo}: not a regular file" in child.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="no flock on Windows: --out is not locked there")
def test_an_out_folder_another_process_writes_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    hold = (
        "import fcntl, os, time\n"
        f"fd = os.open({str(out / LOCK_NAME)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.write(fd, b'%d' % os.getpid())\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        args = ["simulate", "scenarios/cpu_tiny.yaml", "--set", "workload.num_requests=5", "--out", str(out)]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err == (
            f"planner: error: --out {out}: another planner process (pid {holder.pid}) is writing there; wait for it"
            " or choose another --out\n"
        )
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing of ours written
    finally:
        holder.kill()  # a crash: its flock ends with it, no stale lock is left
        holder.wait()
    assert main(args) == 0


def test_a_run_leaves_no_lock_file(tmp_path):
    out = tmp_path / "out"
    args = ["simulate", "scenarios/cpu_tiny.yaml", "--set", "workload.num_requests=5", "--out", str(out)]
    subprocess.run([sys.executable, "-m", "planner.cli", *args], check=True, capture_output=True)
    assert (out / "summary.json").is_file() and not (out / LOCK_NAME).exists()


def test_intervals_say_how_many_runs_rejected_every_request(capsys):
    assert main([*REJECTING, "--intervals", "5", "--json"]) == 0
    intervals = json.loads(capsys.readouterr().out)["intervals"]
    assert intervals["runs"] == 5 and intervals["runs_with_requests"] == 2
    assert main([*REJECTING, "--intervals", "5"]) == 0
    out = capsys.readouterr().out
    assert "90% intervals over 2 of 5 runs (3 rejected every request) (their 5%-95% range" in out
    assert "lands inside about 30% of the time): workload seeds 3..7" in out


def test_no_interval_from_fewer_than_2_runs_with_requests(capsys):
    assert main([*REJECTING, "--intervals", "2", "--json"]) == 0
    intervals = json.loads(capsys.readouterr().out)["intervals"]
    assert intervals["runs"] == 2 and intervals["runs_with_requests"] == 1
    assert all(v == {"low": None, "median": None, "high": None} for v in intervals["metrics"].values())
    assert all(s["probability_met"] is None for s in intervals["slo"])
    assert main([*REJECTING, "--intervals", "2"]) == 0
    out = capsys.readouterr().out
    assert "no 90% intervals: 1 of 2 runs (workload seeds 3..4) completed requests" in out and "5%" not in out
