"""Other processes' CPU load over a span, from /proc/stat minus this process's own CPU time."""

import os
import time

import pytest

from gpu_engine import host_load


def write_stat(path, user: int, system: int, idle: int, steal: int = 0) -> None:
    # the aggregate line: user nice system idle iowait irq softirq steal guest guest_nice (ticks)
    path.write_text(f"cpu  {user} 0 {system} {idle} 7 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")


def test_load_is_the_others_busy_time_over_the_wall_time(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    monkeypatch.setattr(host_load, "PROC_STAT", stat)
    hz = os.sysconf("SC_CLK_TCK")
    write_stat(stat, 1000, 500, 9000)
    clock = iter([10.0, 12.0])  # perf_counter at start and at load(): 2 s of wall time
    own = iter([5.0, 5.5])  # this process used 0.5 CPU s of it
    monkeypatch.setattr(host_load.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(host_load.time, "process_time", lambda: next(own))
    meter = host_load.OtherCpuMeter()
    # 1.5 CPU s busy in all (user +1.0 s, steal +0.5 s; idle and iowait do not count), 0.5 of them ours
    write_stat(stat, 1000 + hz, 500, 9000 + 5 * hz, steal=hz // 2)
    assert meter.load() == pytest.approx((1.5 - 0.5) / 2.0)


def test_no_proc_stat_means_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(host_load, "PROC_STAT", tmp_path / "absent")
    assert host_load.OtherCpuMeter().load() is None


@pytest.mark.skipif(not host_load.PROC_STAT.exists(), reason="Linux only")
def test_on_this_machine_the_load_is_a_number_of_cpus():
    meter = host_load.OtherCpuMeter()
    time.sleep(0.05)
    load = meter.load()
    assert load is not None and 0 <= load <= os.cpu_count() + 0.5  # tick granularity


def test_busy_reasons_name_what_was_busy():
    from planner.calibration.busy import busy_reasons

    assert busy_reasons(0.99, 0.05) == [] and busy_reasons(None, None) == []
    assert busy_reasons(0.5, 0.05) == ["the engine computed only 50% of its busy time"]
    assert busy_reasons(1.0, 1.25) == ["other processes kept 1.2 CPUs busy"]
    assert len(busy_reasons(0.5, 1.0)) == 2
