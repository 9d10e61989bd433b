"""Sizing: a probe's result with only its load and verdict set."""

from __future__ import annotations

from planner.sizing.probe import ProbeResult


def probe_result(load: float, met: bool) -> ProbeResult:
    """A probe at `load` that met its SLOs or not (10 requests, no latencies): for the capacity search alone."""
    return ProbeResult(load, met, False, None, 10, 10, 1.0, 10.0, {}, (), 0.0, 0.0)
