"""How busy the rest of the machine was while the engine ran: other processes' CPU time over a span.

On the CPU device the engine's steps are CPU work, and on a small machine any other busy process slows them,
whether or not it takes the engine's own core: cores share caches, memory bandwidth and, on a virtual
machine, often one physical core (two vCPUs as its two hardware threads). Descheduling alone (the engine's
thread time against its wall time) misses that, so calibration also asks the kernel how much CPU the rest of
the machine used: /proc/stat's busy time of all CPUs (steal included: another virtual machine on the same
host) minus this process's own CPU time, over the span's wall time. Linux only; None elsewhere.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC_STAT = Path("/proc/stat")
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (3 idle and 4 iowait are not busy)


def _machine_busy_s() -> float | None:
    """CPU seconds all CPUs spent busy since boot (the aggregate `cpu` line; the kernel counts in ticks of
    1/SC_CLK_TCK s, 10 ms on most systems: a span of a second reads to about 0.02 CPUs), or None where
    unknown."""
    try:
        with PROC_STAT.open() as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(fields[1 + i]) for i in BUSY_FIELDS if 1 + i < len(fields)]
    return sum(ticks) / os.sysconf("SC_CLK_TCK")


class OtherCpuMeter:
    """Started at construction; `load()` is the average number of CPUs other processes kept busy since
    (0: a quiet machine; 1: one other core's worth of work throughout), or None where /proc/stat is absent."""

    def __init__(self) -> None:
        self._busy_s, self._own_s, self._wall_s = _machine_busy_s(), time.process_time(), time.perf_counter()

    def load(self) -> float | None:
        busy_s = _machine_busy_s()
        wall_s = time.perf_counter() - self._wall_s
        if busy_s is None or self._busy_s is None or wall_s <= 0:
            return None
        others_s = (busy_s - self._busy_s) - (time.process_time() - self._own_s)
        return max(0.0, others_s) / wall_s
