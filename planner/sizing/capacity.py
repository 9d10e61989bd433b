"""A replica's capacity: the highest load (requests/s or users) at which its SLOs still hold in a steady
state, found by probing the simulator (goodput, as vLLM's bench defines it, is then the whole load).

The search starts at the analytic first guess, steps by factors of two until it has a load that passes and
one that fails (or the analytic upper bound, which no run can pass in a steady state: should one pass there,
the bound is wrong for that candidate and the search goes on above it), then bisects on a log scale until
the two are within the tolerance. It assumes that what fails at one load fails at any
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
    short_of: float | None = None  # it failed at this load, the least it needed: the search stopped there
    ran_out: bool = False  # nothing passed, and max_probes ended the search before its lightest load
    # A load passed, but max_probes ended the search before a failing load within the tolerance above it (or the
    # bound there): the capacity is at least `load`, maybe more (2 probes gave 134.7 req/s where 174.7 holds).
    # (An interval's draw, planner/sizing/intervals.py, calls its search open only with no failing load above at
    # all: its galloping steps are one tolerance apart near its start.)
    lower_bound: bool = False


def find_capacity(
    probe: Callable[[float], ProbeResult],
    kind: str,
    guess: float,
    upper: float | None,
    max_probes: int,
    tolerance: float,
    step: float = 2.0,
    must_reach: float | None = None,
    gallop: bool = False,
) -> Capacity:
    """`probe(load)` runs one simulation; `upper` is a load no steady state passes (None: unknown).

    `step`: the factor between bracketing probes (a guess from a similar candidate is close: step by the
    tolerance). `must_reach`: a load below which the capacity is of no use (the candidate could not beat
    one already found): probed first, and if it fails the search stops there (`short_of`).
    `gallop`: square the step after each bracketing probe (x1.1, x1.21, x1.46, x2.14...): a start that is
    likely close (an interval's draw starts at the nominal capacity) costs few probes when it is, and a far
    capacity is still bracketed within a few more.
    """
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
    bound = snap(upper) if upper is not None else None  # until a run passes there
    if must_reach is not None:
        if not run(must_reach):
            probes = tuple(results.values())
            return Capacity(0.0, probes, None, probes[0], short_of=snap(must_reach))
        lo = snap(must_reach)
        guess = max(guess, lo * step, lo + 1 if users else lo)
    x = snap(min(guess, upper) if upper else guess)
    while len(results) < max_probes:  # bracket
        if run(x):
            lo = x
            if bound is not None and x >= bound:
                # A steady state passed at the bound: it is not one for this candidate (the cost model's terms
                # it leaves out cannot make a run faster, so the bound missed a saving). Search on above it.
                hi = bound = None
            if hi is not None and (hi <= x * (1 + tolerance) or (users and hi - x <= 1)):
                if bound is not None and hi not in results:  # the bracket closes on the bound, never run: run it
                    x = bound
                    continue
                break
            up = max(step * x, x + 1) if users else step * x  # users: at least one more
            step = step * step if gallop else step
            x = snap(min(up, hi) if hi is not None else up)
            if hi is not None and x >= hi:  # the bound itself: try it once only if it is the next step
                x = snap(hi)
                if x in results:
                    break
        else:
            hi = x
            if lo > 0 or x <= floor_load:
                break
            down = min(x / step, x - 1) if users else x / step
            step = step * step if gallop else step
            x = snap(max(down, floor_load))
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
    ran_out = lo == 0 and len(results) >= max_probes and probes[0].load > snap(floor_load)
    closed = hi is not None and (hi <= lo * (1 + tolerance) or (users and hi - lo <= 1))
    return Capacity(float(lo), probes, best, probes[0], ran_out=ran_out, lower_bound=lo > 0 and not closed)
