"""A replica's capacity: the highest load (requests/s or users) at which its SLOs still hold in a steady
state, found by probing the simulator (goodput, as vLLM's bench defines it, is then the whole load).

The search starts at the analytic first guess, steps by factors of two until it has a load that passes and
one that fails (or the analytic upper bound, which no run can pass in a steady state), then bisects on a
log scale until the two are within the tolerance. It assumes that what fails at one load fails at any
higher one, which holds for these queues up to the noise of a finite run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.sizing.probe import ProbeResult

MIN_RATE_FRACTION = 1 / 64  # of the first guess: below it a rate is "no load" and the candidate has no capacity


@dataclass(frozen=True)
class Capacity:
    load: float  # per replica; 0: the SLOs fail even at the lightest load tried
    probes: tuple[ProbeResult, ...]  # sorted by load: the latency-vs-load curve
    best: ProbeResult | None  # the passing probe at `load` (None if none passed)
    lightest: ProbeResult  # the lightest load tried: how close a candidate with no capacity came


def find_capacity(
    probe: Callable[[float], ProbeResult],
    kind: str,
    guess: float,
    upper: float | None,
    max_probes: int,
    tolerance: float,
) -> Capacity:
    """`probe(load)` runs one simulation; `upper` is a load no steady state passes (None: unknown)."""
    users = kind == "users"
    snap = (lambda x: max(1, round(x))) if users else (lambda x: x)
    floor_load = 1 if users else guess * MIN_RATE_FRACTION
    results: dict[float, ProbeResult] = {}

    def run(x: float) -> bool:
        x = snap(x)
        if x not in results:
            results[x] = probe(x)
        return results[x].met

    lo, hi = 0.0, upper
    x = snap(min(guess, upper) if upper else guess)
    while len(results) < max_probes:  # bracket
        if run(x):
            lo = x
            if hi is not None and (hi <= x * (1 + tolerance) or (users and hi - x <= 1)):
                break
            x = snap(min(2 * x, hi) if hi is not None else 2 * x)
            if hi is not None and x >= hi:  # the bound itself: try it once only if it is the next step
                x = snap(hi)
                if x in results:
                    break
        else:
            hi = x
            if lo > 0 or x <= floor_load:
                break
            x = snap(max(x / 2, floor_load))
    while lo > 0 and hi is not None and len(results) < max_probes:  # bisect
        if hi / lo <= 1 + tolerance or (users and hi - lo <= 1):
            break
        x = snap(math.sqrt(lo * hi))
        if x in results:
            break
        if run(x):
            lo = x
        else:
            hi = x
    probes = tuple(results[k] for k in sorted(results))
    best = results.get(lo) if lo > 0 else None
    return Capacity(float(lo), probes, best, probes[0])
