"""Bad input around a run's files: an --out folder another process is writing, and --intervals runs that rejected
every request (a malformed checkpoint index and a FIFO for a tensor file: tests/test_engine_weights.py)."""

import json
import subprocess
import sys

import pytest

from planner.cli import main
from planner.outputs.out_lock import LOCK_NAME

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
