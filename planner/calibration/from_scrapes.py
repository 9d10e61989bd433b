"""`planner calibrate --from-vllm` given Prometheus scrapes only (docs/calibration-from-vllm.md): each window
rebuilt as a workload (planner.calibration.scrape_replay), the last held out when there are several, and the
held-out window's summary, observed and simulated, in the form `planner calibrate`'s validation table reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from planner.calibration.histogram_match import PHASES, WithHistograms, histogram_match, in_window, simulated_histograms
from planner.calibration.scrape_replay import ScrapeWindow, window_replay
from planner.calibration.validate import HeldOutRun
from planner.calibration.vllm_fit import simulate_replay
from planner.calibration.vllm_replay import growing_ttft, simulated
from planner.vllm_files import binned, names
from sim.cost_coefficients import CostCoefficients

PREFIX_QUERIES, PREFIX_HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"


def scrape_replays(scenario, inputs, folder: Path) -> tuple[list[ScrapeWindow], list[ScrapeWindow], list[str]]:
    """The fitted windows, the held-out ones and the lines saying what was read and assumed."""
    lines = ["Read (Prometheus scrapes only: the workload is rebuilt from the windows' counters and histograms):"]
    windows = []
    for i, scrape in enumerate(inputs.windows):
        window, said = window_replay(scenario, scrape, i, folder / f"window-{i}.csv", inputs.engine)
        windows.append(window)
        lines += said + _prefix_line(scrape)
    lines += ["Engine facts from the files (they replace the scenario's):", *(inputs.facts or ["  none"])]
    engine = windows[0].scenario.engine
    lines.append(f"  max_num_seqs = {engine.max_num_seqs} (the scenario's: vLLM's files do not carry it)")
    if len(windows) == 1:
        lines.append("Held out: nothing (one window; a folder of periodic scrapes holds its last window out)")
        return windows, [], lines
    lines.append(f"Held out: the last window, {windows[-1].name} (fit on the {len(windows) - 1} before it)")
    return windows[:-1], windows[-1:], lines


def with_phases(fitted: list, held: list, windows) -> tuple[list, list[str]]:
    """The fitted bench replays, each whose requests a scrape window counted exactly (the same number: a scrape
    before and after the run) matched with that window's queue, prefill and decode histograms too
    (histogram_match.WithHistograms); and the lines saying which. A window of a held-out file's requests, or of
    some held out, is not matched: the held-out table must not have been fitted."""
    lines, out = [], list(fitted)
    for window in windows:
        e2e = window.histogram(names.E2E)
        count = round(e2e.count) if e2e is not None else 0
        mine = [i for i, r in enumerate(out) if len(r.fit_mask) == count and r.fit_mask.all() and r is fitted[i]]
        if not mine:
            theirs = [r.name for r in held if len(r.fit_mask) == count]
            why = (
                f"{theirs[0]}'s, held out (all or some)" if theirs else "no fitted file's (scrape before and after one)"
            )
            lines.append(
                f"  {window.path}: queue, prefill and decode times not matched: its {count:,} requests are {why}"
            )
            continue
        stats, not_matched = histogram_match(window, PHASES)
        if stats.matched:
            out[mine[0]] = WithHistograms(out[mine[0]], stats, window.path.name)
            shown = ", ".join(dict.fromkeys(label for label, _ in stats.matched))
            lines.append(f"  {window.path}: its {count:,} requests are {out[mine[0]].name}'s: its {shown} matched too")
        lines += not_matched
    return out, lines


def _growing(window: ScrapeWindow, before: ScrapeWindow) -> bool:
    """Saturation seen from the windows, the bench rule read across them (a scrape has no request's time): the
    held-out window's mean TTFT above 1.5x the window's before it."""
    mean = [_mean_s(w.stats.observed.get("TTFT")) for w in (window, before)]
    return bool(mean[1] > 0 and mean[0] > 1.5 * mean[1])


def _prefix_line(scrape) -> list[str]:
    """The prefix cache's hit rate, where the window counts it: said, not rebuilt (the counters do not say which
    prompts shared what)."""
    queries = sum(v for (n, _), v in scrape.counters.items() if n == PREFIX_QUERIES)
    hits = sum(v for (n, _), v in scrape.counters.items() if n == PREFIX_HITS)
    if queries <= 0:
        return []
    said = (
        f"    prefix cache: {hits / queries:.1%} of {queries:,.0f} prompt tokens hit; NOT rebuilt (prompts share no"
        " prefix in the replay): the fitted prefills are slower than the engine's by about that share"
    )
    return [said]


def _mean_s(h) -> float:
    return h.sum / h.count if h is not None and h.count > 0 else 0.0


def _window_summary(hists: dict, window_s: float, output_tokens: float, num_gpu_blocks) -> dict:
    """The figures the held-out table compares, from histograms: exact means (`_sum` / `_count`), quantiles
    interpolated in buckets."""
    out = {
        "request_throughput": hists["E2E"].count / window_s,
        "output_throughput": output_tokens / window_s,
        "memory": {"num_gpu_blocks": num_gpu_blocks},
        "peak_memory_bytes": None,
    }
    for label, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2el")):
        h = hists.get(label)
        out[f"mean_{key}_ms"] = h.sum / h.count * 1e3 if h is not None and h.count > 0 else None
        for stat, q in (("median", 0.5), ("p90", 0.9), ("p99", 0.99)):
            found = binned.quantile(h.bounds, h.cumulative, h.count, q) if h is not None else None
            out[f"{stat}_{key}_ms"] = found[0] * 1e3 if found is not None else None
    return out


def held_out_window(window: ScrapeWindow, before: ScrapeWindow, fitted: CostCoefficients, inputs) -> HeldOutRun:
    blocks, stats = inputs.engine.get("num_gpu_blocks_override"), window.stats
    summaries = {"measured": _window_summary(stats.observed, stats.window_s, window.output_tokens, blocks)}
    flags = {"measured": _growing(window, before)}
    latencies = {}
    for way, coefficients in (("calibrated", fitted), ("uncalibrated", CostCoefficients())):
        recorder = simulate_replay(window, coefficients).recorder
        req, _ = in_window(recorder, stats.from_s, stats.window_s)
        hists = simulated_histograms(recorder, stats.observed, stats.from_s, stats.window_s)
        tokens = float(req["output_tokens"].sum())
        summaries[way] = _window_summary(hists, stats.window_s, tokens, recorder.num_gpu_blocks)
        lat = simulated(recorder)
        every = np.ones(len(lat.ttft_s), dtype=bool)
        flags[way] = growing_ttft(lat, every)
        latencies[way] = {"ttft": lat.ttft_s * 1e3, "tpot": lat.tpot_s(every) * 1e3, "e2el": lat.e2e_s * 1e3}
    return HeldOutRun(
        f"{window.name} (held out)",
        window.scenario,
        summaries["measured"],
        summaries["calibrated"],
        summaries["uncalibrated"],
        latencies,
        {},
        flags,
        {},
    )
