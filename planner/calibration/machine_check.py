"""Was the machine during a held-out live run the machine the sweep measured (`MachineCheck`)? From the
reference step's times around and during the run and, on CPU, the engine's CPU share and the other
processes' load."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.calibration.busy import MAX_OTHER_LOAD, MIN_CPU_SHARE

SLOWDOWN_LIMIT = 0.10  # the reference step more than this much slower than at the sweep: a busy machine


@dataclass(frozen=True)
class MachineCheck:
    """Was the machine during a live run the machine the sweep measured? A shared machine slows every step
    while other processes run, and a held-out error measured then is the machine's, not the model's.

    slowdown: the reference step's time around the run (the worst of before, after and the median of its
    probes during it, gpu_engine.engine.PROBE_EVERY_S) over its time at the sweep, minus 1;
    cpu_share: on CPU, the share of the engine's busy wall time its thread computed (None on CUDA);
    other_load: on CPU, the CPUs other processes kept busy on average during the run (None on CUDA or where
    the OS does not say: gpu_engine/host_load.py). The probes see a machine that slows with nothing else
    running in it (another virtual machine on the host); the other two see this machine's own processes."""

    slowdown: float | None
    cpu_share: float | None
    attempts: int
    other_load: float | None = None

    @property
    def clean(self) -> bool:
        fast = self.slowdown is None or self.slowdown <= SLOWDOWN_LIMIT
        alone = self.other_load is None or self.other_load <= MAX_OTHER_LOAD
        return fast and alone and (self.cpu_share is None or self.cpu_share >= MIN_CPU_SHARE)

    @property
    def badness(self) -> float:
        share = self.cpu_share if self.cpu_share is not None else 1.0
        return max(self.slowdown or 0.0, 0.0) + (1.0 - share) + (self.other_load or 0.0)

    def describe(self) -> str:
        parts = []
        if self.slowdown is not None:
            parts.append(f"reference step {self.slowdown:+.0%} vs the sweep")
        if self.cpu_share is not None:
            parts.append(f"engine had the CPU {self.cpu_share:.0%} of the time")
        if self.other_load is not None:
            parts.append(f"other processes kept {self.other_load:.2f} CPUs busy")
        tries = f", best of {self.attempts} runs" if self.attempts > 1 else ""
        return ("machine as at the sweep" if self.clean else "BUSY MACHINE: " + ", ".join(parts)) + tries


def machine_check(extra: dict, reference_s: float | None, attempts: int) -> MachineCheck:
    """The reference step's worst of: before the run, after it, and the median of its probes during it."""
    around, during = extra.get("reference_step_s") or [], extra.get("reference_during_s") or []
    timed = [*around, *([float(np.median(during))] if during else [])]
    slowdown = max(timed) / reference_s - 1 if timed and reference_s else None
    return MachineCheck(slowdown, extra.get("cpu_share"), attempts, extra.get("other_cpu_load"))
