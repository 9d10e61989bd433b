"""The gauges the scrapes hold (vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc)
against the simulation's at the same instants: each window's end, simulated with the fitted coefficients.

Compared and printed, not fitted: a gauge is one instant per scrape, a sample of one (a Poisson burst moves it by
its square root); over a series its mean is, by Little's law, the request rate times the mean time in that state,
which the queue, prefill and decode histograms already match over every request of the window.
"""

from __future__ import annotations

import numpy as np

from planner.vllm_files import names
from planner.vllm_files.export import gauges_at
from sim.cost_coefficients import CostCoefficients

SHOWN = (
    (names.RUNNING, "running", "{:,.0f}"),
    (names.WAITING, "waiting", "{:,.0f}"),
    (names.KV_USAGE, "KV cache", "{:.1%}"),
)


def observed_gauges(scrape) -> dict[str, float]:
    """The scrape's gauges over its engines: the queues summed, the KV cache's use their mean."""
    out = {}
    for name, _, _ in SHOWN:
        values = [v for (n, _), v in scrape.gauges.items() if n == name]
        if values:
            out[name] = float(np.mean(values) if name == names.KV_USAGE else np.sum(values))
    return out


def gauge_lines(windows, coefficients: CostCoefficients) -> list[str]:
    """A line per window with gauges: each observed at its end (simulated at the same instant), and their means."""
    from sim.driver import simulate

    rows = []
    for window in windows:
        if not window.gauges:
            continue
        result = simulate(window.scenario, coefficients, record_steps=True, facts=window.facts)
        recorder = result.recorder
        requests = recorder.requests.view()
        at_s = window.stats.from_s + window.stats.window_s
        rows.append((window.name, window.gauges, gauges_at(recorder, requests, at_s, after_run=False)))
    if not rows:
        return []
    head = (
        "Gauges at each window's end, observed (simulated with the fitted coefficients at the same instant):"
        " compared, not fitted (one instant each; their mean over a series is the rate times the phases' mean"
        " times, which the histograms match)"
    )
    lines = [head]
    for name, seen, simulated in rows:
        lines.append(f"  {name}: {_shown(seen, simulated)}")
    if len(rows) > 1:
        keys = set.intersection(*(set(seen) for _, seen, _ in rows))
        mean_seen = {k: float(np.mean([seen[k] for _, seen, _ in rows])) for k in keys}
        mean_sim = {k: float(np.mean([sim.get(k, np.nan) for _, _, sim in rows])) for k in keys}
        lines.append(f"  mean over {len(rows)} windows: {_shown(mean_seen, mean_sim, whole=False)}")
    return lines


def _shown(seen: dict, simulated: dict, whole: bool = True) -> str:
    parts = []
    for name, label, form in SHOWN:
        if name not in seen:
            continue
        form = form if whole or name == names.KV_USAGE else "{:,.1f}"
        value = simulated.get(name)
        other = form.format(value) if value is not None and np.isfinite(value) else "not simulated"
        parts.append(f"{label} {form.format(seen[name])} ({other})")
    return ", ".join(parts)
