"""When a CPU measurement ran on a busy machine: the limits that `planner run`, `planner calibrate` (its
sweep and held-out runs) and `calibrate --from` share.

On the CPU device the engine's steps are CPU work, so other processes slow them two ways: they take the
engine's core (its thread then computes for less than its wall time: `cpu_share`), and they run beside it
on other cores that share its caches, memory bandwidth or, on a virtual machine, its physical core
(`other_cpu_load`, gpu_engine/host_load.py). Either makes a measurement describe the machine's load too.
"""

from __future__ import annotations

MIN_CPU_SHARE = 0.90  # the engine's thread computed less of its busy wall time: other processes took its core
MAX_OTHER_LOAD = 0.2  # other processes kept more CPUs than this busy on average


def busy_reasons(cpu_share: float | None, other_cpu_load: float | None) -> list[str]:
    """Why a CPU measurement is not the engine's alone (empty: it is, or nothing was measured)."""
    reasons = []
    if isinstance(cpu_share, int | float) and cpu_share < MIN_CPU_SHARE:
        reasons.append(f"the engine computed only {cpu_share:.0%} of its busy time")
    if isinstance(other_cpu_load, int | float) and other_cpu_load > MAX_OTHER_LOAD:
        reasons.append(f"other processes kept {other_cpu_load:.1f} CPUs busy")
    return reasons
