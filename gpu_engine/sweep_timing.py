"""The step sweep's timing (gpu_engine.sweep): every shape timed in rounds within a budget, outliers
re-measured, each shape's median with its confidence interval.

Timing is built for a noisy, shared machine (another process may stall a step by hundreds of ms):
- round 0 warms every shape up (first calls allocate and, on CUDA, compile) and times it once;
- then rounds: each round times every shape once, so a slow spell of the machine hits one round of many
  shapes rather than every repeat of one shape;
- a sample is an outlier when it is far from its shape's median (in median absolute deviations), when
  its whole round ran slow, or (given a round meter) when other processes kept the machine busy during its
  round or the reference step ran slower in it than in the machine's fastest round; outliers are
  re-measured and never enter the median;
- budget left over buys more rounds for the shapes whose median is still uncertain;
- each row keeps the median of its inliers, their spread and the width of the median's 95% confidence
  interval; a row whose median is still uncertain is marked unstable (the fitter leaves it out).
Everything is bounded by `budget_s` on the given clock: fewer rounds, then fewer shapes, never a longer run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

WARMUP_CALLS = 2  # per shape before its first timed call
MIN_ROUNDS, MAX_ROUNDS = 3, 9  # timed samples per shape (round 0 included)
ROUND0_SHARE = 0.4  # of the budget at most, for warm-up and the first timing of each shape
OUTLIER_MADS = 5.0  # |sample - median| beyond this many (normal-scaled) MADs is an outlier ...
OUTLIER_FLOOR = 0.15  # ... and beyond this fraction of the median (timer jitter is a few %)
SLOW_ROUND = 0.2  # a round whose median sample/median ratio is off by more than this ran in a slow spell
MAX_REMEASURE_PASSES = 6  # while the budget lasts: a slow spell of the machine can outlast a few passes
MAX_SAMPLES = 40  # per shape: extra rounds for the uncertain ones while the budget lasts
UNSTABLE_CI = 0.2  # the 95% confidence interval of the median wider than this fraction of it: not fitted
SLOWER_THAN_BEST = 0.10  # a round whose reference step ran this much slower than the fastest round's: re-measured


@dataclass
class Measured:
    """One shape's samples: kept ones and how many were thrown out as outliers."""

    samples: list[tuple[int, float, float]]  # (round, device_s, host_s)
    num_outliers: int = 0

    def totals(self) -> np.ndarray:
        return np.array([device + host for _, device, host in self.samples])


def _robust(values: np.ndarray) -> tuple[float, float]:
    median = float(np.median(values))
    return median, 1.4826 * float(np.median(np.abs(values - median)))


def _outliers(measured: list[Measured], slow_rounds: set[int]) -> list[list[int]]:
    """Per shape, the indices of its samples that are outliers."""
    out = []
    for m in measured:
        totals = m.totals()
        median, mad = _robust(totals)
        limit = max(OUTLIER_MADS * mad, OUTLIER_FLOOR * median)
        rounds = [r for r, _, _ in m.samples]
        out.append([i for i, (r, s) in enumerate(zip(rounds, totals)) if abs(s - median) > limit or r in slow_rounds])
    return out


def _slow_rounds(measured: list[Measured]) -> set[int]:
    """Rounds where the whole machine ran slow (or fast): their median sample/shape-median ratio is off."""
    ratios: dict[int, list[float]] = {}
    for m in measured:
        totals = m.totals()
        median = float(np.median(totals))
        for (r, _, _), s in zip(m.samples, totals):
            ratios.setdefault(r, []).append(s / median)
    return {r for r, v in ratios.items() if len(v) >= 3 and abs(float(np.median(v)) - 1) > SLOW_ROUND}


def median_ci(values: np.ndarray) -> float:
    """Width of the median's distribution-free 95% confidence interval (order statistics n/2 -+ 0.98 sqrt(n)),
    relative to the median; inf with fewer than MIN_ROUNDS values."""
    n = len(values)
    if n < MIN_ROUNDS:
        return float("inf")
    ordered = np.sort(values)
    low = max(int(np.floor(n / 2 - 0.98 * np.sqrt(n))), 0)
    high = min(int(np.ceil(n / 2 + 0.98 * np.sqrt(n))), n - 1)
    return float(ordered[high] - ordered[low]) / float(np.median(values))


def measure(
    num_shapes: int,
    time_shape: Callable[[int], tuple[float, float]],
    clock: Callable[[], float],
    budget_s: float,
    progress: Callable[[float, float], None] | None = None,
    round_meter: Callable[[], Callable[[], tuple[bool, float | None]]] | None = None,
) -> list[Measured]:
    """Time shapes 0..num_shapes-1 (in that priority) within budget_s; `time_shape(i)` runs shape i once and
    returns its (device_s, host_s) (warm-ups are calls whose result is ignored). Shapes beyond what the budget allows
    for MIN_ROUNDS samples are dropped from the end, so the result may be shorter than num_shapes.

    `round_meter()`, called as a round starts, returns a callable that says at its end (busy, speed_s):
    whether other processes kept the machine busy meanwhile, and the reference step's seconds over the round
    (planner calibrate passes one on CPU). A round that was busy, or whose reference step ran more than
    SLOWER_THAN_BEST slower than in the machine's fastest round, is re-measured like a slow round, whether
    or not its samples look slow: the machine's own speed changes (another virtual machine on the host)
    shift every shape alike, which no per-shape rule sees."""
    start = clock()
    busy_rounds: set[int] = set()
    round_speed_s: dict[int, float] = {}

    def meter_ends(r: int, end: Callable[[], tuple[bool, float | None]] | None) -> None:
        if end is None:
            return
        busy, speed_s = end()
        if busy:
            busy_rounds.add(r)
        if speed_s is not None:
            round_speed_s[r] = speed_s

    def slow_machine_rounds() -> set[int]:
        best = min(round_speed_s.values(), default=None)
        return {r for r, v in round_speed_s.items() if best and v > (1 + SLOWER_THAN_BEST) * best}

    def timed_round(r: int, shapes: Sequence[int], repeats: Sequence[int] | None = None) -> None:
        end = round_meter() if round_meter is not None else None
        for i, n in zip(shapes, repeats or [1] * len(shapes)):
            measured[i].samples += [(r, *time_shape(i)) for _ in range(n)]
        meter_ends(r, end)

    def elapsed() -> float:
        done = clock() - start
        if progress is not None:
            progress(min(done, budget_s), budget_s)
        return done

    measured: list[Measured] = []
    end = round_meter() if round_meter is not None else None
    for i in range(num_shapes):  # round 0: warm up, time once
        if measured and elapsed() > ROUND0_SHARE * budget_s:
            break
        for _ in range(WARMUP_CALLS):
            time_shape(i)
        measured.append(Measured([(0, *time_shape(i))]))
    meter_ends(0, end)
    estimate = [float(m.totals()[0]) for m in measured]
    remaining = budget_s - elapsed()
    # Keep 20% of what is left for re-measuring; drop shapes until MIN_ROUNDS samples each fit.
    while len(measured) > 1 and (MIN_ROUNDS - 1) * sum(estimate) > 0.8 * remaining:
        measured.pop()
        estimate.pop()
    num_rounds = int(np.clip(0.8 * remaining // max(sum(estimate), 1e-9) + 1, MIN_ROUNDS, MAX_ROUNDS))
    for r in range(1, num_rounds):
        if elapsed() > budget_s:
            break
        timed_round(r, range(len(measured)))

    next_round = num_rounds
    while elapsed() < 0.8 * budget_s:  # more samples where the median is still uncertain
        uncertain = [i for i, m in enumerate(measured) if median_ci(m.totals()) > UNSTABLE_CI]
        uncertain = [i for i in uncertain if len(measured[i].samples) < MAX_SAMPLES]
        if not uncertain:
            break
        timed_round(next_round, uncertain)
        next_round += 1
    for _ in range(MAX_REMEASURE_PASSES):
        flagged = _outliers(measured, _slow_rounds(measured) | busy_rounds | slow_machine_rounds())
        if not any(flagged) or elapsed() > budget_s:
            break
        for m, bad in zip(measured, flagged):
            if bad:
                m.samples = [s for j, s in enumerate(m.samples) if j not in bad]
                m.num_outliers += len(bad)
        redo = [(i, len(bad)) for i, bad in enumerate(flagged) if bad]
        timed_round(next_round, [i for i, _ in redo], [n for _, n in redo])
        next_round += 1
    for m, bad in zip(measured, _outliers(measured, set())):  # what re-measuring could not replace
        if bad and len(bad) < len(m.samples):
            m.samples = [s for j, s in enumerate(m.samples) if j not in bad]
            m.num_outliers += len(bad)
    return measured
