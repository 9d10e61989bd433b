"""The cost model's `idle_wake_s` in a profile: the seconds the first step after the engine waited for work takes
beyond its price.

`planner calibrate --device` times it apart from the sweep (gpu_engine/sweep_idle.py); `planner calibrate --from`
reads it off the runs themselves: their steps that started IDLE_WAKE_AFTER_S or more after the previous one
ended (or first in their run) are left out of the step fit and measured against its price. Either way it is a
median with the standard error of a median, so a few steps stalled by another process do not set it.

It is the wake as the request that woke the engine sees it, from its arrival: the simulator starts that step at
the arrival, where a live engine first finishes its sleep (which overshoots: 0.2 ms on this repository's 2-vCPU
machine) and finds the work. So `--from` adds each woken step's wait since its waking arrival (`waking_delays`), and
the sweep the sleep's overshoot; without it the runs' own files (`--from-vllm`, which see the TTFT) priced the
steps after idle 0.15-0.54 ms above `--from` (docs/calibration-from-vllm.md).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sim.cost_model import IDLE_WAKE_AFTER_S

MIN_WOKEN_STEPS = 5  # fewer steps after idle in the runs: the term is not fitted (and the profile prices it as 0)


@dataclasses.dataclass(frozen=True)
class WakeFit:
    seconds: float
    std: float
    samples: int
    how: str  # what the samples were, as the terminal says it

    def lines(self) -> list[str]:
        return [f"First step after idle: {self.how}: idle_wake_s {self.seconds:.4g} +- {self.std:.2g}"]


def median_with_error(values: np.ndarray) -> tuple[float, float]:
    """The median and its standard error (1.2533 x the MAD-scaled spread / sqrt(n): the normal's)."""
    median = float(np.median(values))
    spread = 1.4826 * float(np.median(np.abs(values - median)))
    return median, 1.2533 * spread / float(np.sqrt(len(values)))


def woken_steps(rows: dict[str, np.ndarray]) -> np.ndarray:
    """Per step of one run's steps.csv: whether the engine waited IDLE_WAKE_AFTER_S or longer before it (the
    run's first step: from the run's start, as the simulator counts it)."""
    start = np.asarray(rows["start_s"], dtype=np.float64)
    end = start + np.asarray(rows["duration_s"], dtype=np.float64)
    gap = start - np.concatenate([[0.0], end[:-1]])
    return gap >= IDLE_WAKE_AFTER_S


def waking_delays(rows: dict[str, np.ndarray], arrival_s: np.ndarray) -> np.ndarray:
    """Per step after idle (woken_steps' order): the seconds from the arrival of the request that woke the engine,
    the first arrival after the previous step ended (or after the run's start), to the step's start; 0 where no
    arrival lies between them (a run's requests.csv holds every arrival)."""
    start = np.asarray(rows["start_s"], dtype=np.float64)
    end = start + np.asarray(rows["duration_s"], dtype=np.float64)
    previous_end = np.concatenate([[0.0], end[:-1]])
    woken = woken_steps(rows)
    arrivals = np.sort(np.asarray(arrival_s, dtype=np.float64))
    if len(arrivals) == 0:
        return np.zeros(int(woken.sum()))
    first = np.minimum(np.searchsorted(arrivals, previous_end[woken], side="left"), len(arrivals) - 1)
    waking = arrivals[first]
    return np.where(waking <= start[woken], start[woken] - waking, 0.0)


def from_waking_arrival(rows: dict[str, np.ndarray], arrival_s: np.ndarray | None) -> np.ndarray:
    """Each step's seconds, those after idle from their waking arrival (`waking_delays`; as timed without arrivals)."""
    seconds = np.asarray(rows["duration_s"], dtype=np.float64).copy()
    if arrival_s is not None:
        seconds[woken_steps(rows)] += waking_delays(rows, arrival_s)
    return seconds


def _fit(extra_s: np.ndarray, how: str) -> WakeFit:
    """A step cannot run faster for having waited: a negative median (noise) is kept at 0."""
    seconds, std = median_with_error(np.asarray(extra_s, dtype=np.float64))
    return WakeFit(max(seconds, 0.0), std, len(extra_s), how)


def wake_from_idle_samples(cold_s: np.ndarray, warm_s: np.ndarray, idle_s: float, num_shapes: int) -> WakeFit:
    """The term from the sweep's steps timed after an idle spell and warm (gpu_engine.sweep_idle.wake_samples)."""
    how = (
        f"{len(cold_s)} steps of {num_shapes} shapes timed after {idle_s * 1e3:.0f} ms idle and warm"
        f" (warm median {float(np.median(warm_s)) * 1e3:.3g} ms)"
    )
    return _fit(np.asarray(cold_s) - np.asarray(warm_s), how)


def wake_from_steps(
    measured_s: np.ndarray, predicted_s: np.ndarray, delay_s: np.ndarray | None = None
) -> WakeFit | None:
    """The term from steps after idle: their measured seconds, and each one's wait since its waking arrival
    (`waking_delays`; None: not known), beyond their price; None below MIN_WOKEN_STEPS."""
    if len(measured_s) < MIN_WOKEN_STEPS:
        return None
    how = f"{len(measured_s)} steps of the runs after idle, against the fit's price"
    if delay_s is None:
        return _fit(np.asarray(measured_s) - np.asarray(predicted_s), how + " (from their start: no arrivals)")
    how += f", from their waking arrival (median wait {float(np.median(delay_s)) * 1e3:.3g} ms)"
    return _fit(np.asarray(measured_s) + np.asarray(delay_s) - np.asarray(predicted_s), how)


def with_wake(profile, wake: WakeFit | None):
    """The profile (planner.calibration.profile.Profile) with idle_wake_s and its std; its id recomputed."""
    from planner.calibration.profile import content_id

    if wake is None:
        return profile
    changed = dataclasses.replace(
        profile,
        id="",
        coefficients=dict(profile.coefficients) | {"idle_wake_s": wake.seconds},
        uncertainty=dict(profile.uncertainty) | {"idle_wake_s": wake.std},
    )
    return dataclasses.replace(changed, id=content_id(changed.to_dict()))
