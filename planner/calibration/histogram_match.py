"""The statistics of a window's Prometheus histograms that the fit matches, observed and simulated (the Replay
protocol of planner.calibration.vllm_fit), and a bench replay with them beside its own (WithHistograms).

Per histogram: the mean (its `_sum` over its `_count`: exact) and the 10/25/50/75/90th percentiles interpolated
within buckets (planner.vllm_files.binned), the simulated requests put through the same buckets, so that the
interpolation's own error is the same on both sides. Quantiles rather than bucket counts: the relative errors the
bench fit uses, and a bucket count moves in jumps of one request where an interpolated quantile moves with every
request that crosses a bound. Each quantile is left open by its bucket's width (binned.resolution), which the fit
carries into the coefficients' standard errors; one whose bucket leaves it open by more than MAX_RESOLUTION of
itself, or that falls in the first bucket (interpolated from 0: vLLM's per-request time buckets start at 0.3 s, and
a 40 ms prefill's quantiles would only say how many requests there are) or the +Inf bucket, is not matched.

The per-request phases (vllm/v1/metrics/stats.py, update_from_finished_request): queue time from arrival to the
first scheduled step, prefill time from there to the first token, decode time from the first token to the last.
They separate waiting from computing: an engine that is slow to compute and one that is short of slots give the
same TTFT, not the same queue time. The queue time is matched only where it is at least MIN_QUEUE_SHARE of the
mean TTFT: a relative error of near-zero waits is noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.calibration.vllm_fit import BOOTSTRAP_SAMPLES, QUANTILES
from planner.vllm_files import binned, names
from planner.vllm_files.export import gap_cumulative
from planner.vllm_files.prom_read import Histogram, Scrape

LATENCIES = (("TTFT", names.TTFT), ("TPOT", names.TPOT), ("ITL", names.ITL), ("E2E", names.E2E))
PHASES = (("QUEUE", names.QUEUE), ("PREFILL", names.PREFILL), ("DECODE", names.DECODE))
MAX_RESOLUTION = 0.5
MIN_QUEUE_SHARE = 0.1


@dataclass(frozen=True)
class HistogramMatch:
    """What the fit matches of some observed histograms, in the simulation's window [from_s, from_s + window_s]."""

    observed: dict[str, Histogram]  # label (TTFT, ...) -> the window's histogram
    matched: tuple[tuple[str, int | None], ...]  # (label, percentile; None: the mean)
    from_s: float = 0.0
    window_s: float = math.inf

    def measured(self) -> tuple[np.ndarray, list[str]]:
        values = [_statistic(self.observed[label], q) for label, q in self.matched]
        return np.asarray(values), [f"{label} {'mean' if q is None else f'p{q}'}" for label, q in self.matched]

    def predicted(self, recorder) -> np.ndarray:
        hists = simulated_histograms(recorder, self.observed, self.from_s, self.window_s)
        return np.asarray([_statistic(hists[label], q) for label, q in self.matched])

    def resolution(self) -> np.ndarray:
        return np.asarray([_resolution(self.observed[label], q) for label, q in self.matched])

    def bootstrap(self, recorder, rng) -> np.ndarray:
        """The fit's relative errors over BOOTSTRAP_SAMPLES multinomial resamples of both sides' bucket counts
        (the observed requests and the simulated ones are each a sample of what the engine does; a resampled
        mean moves by the resampled counts at their buckets' middles), less those of the histograms as they are."""
        sim = simulated_histograms(recorder, self.observed, self.from_s, self.window_s)
        base = self.predicted(recorder) / self.measured()[0]
        rows = []
        for _ in range(BOOTSTRAP_SAMPLES):
            obs_r = {k: _resampled(h, rng) for k, h in self.observed.items()}
            sim_r = {k: _resampled(h, rng) for k, h in sim.items()}
            ratio = [_statistic(sim_r[k], q) / _statistic(obs_r[k], q) for k, q in self.matched]
            rows.append(np.asarray(ratio) - base)
        return np.asarray(rows)


def histogram_match(
    scrape: Scrape, kinds, from_s: float = 0.0, window_s: float = math.inf
) -> tuple[HistogramMatch, list[str]]:
    """The scrape's histograms of `kinds` (LATENCIES, PHASES) that hold observations, what of them is matched, and
    the lines saying what is not."""
    observed = {label: h for label, name in kinds if (h := scrape.histogram(name)) is not None and h.count > 0}
    matched, left = [], []
    for label, h in observed.items():
        if label == "QUEUE":
            ttft = scrape.histogram(names.TTFT)
            share = h.sum / ttft.sum if ttft is not None and ttft.sum > 0 else 0.0
            if share < MIN_QUEUE_SHARE:
                left.append(f"QUEUE: its mean is {share:.1%} of the mean TTFT (under {MIN_QUEUE_SHARE:.0%})")
                continue
        matched.append((label, None))
        kept = [q for q in QUANTILES if _resolution(h, q) <= MAX_RESOLUTION]
        matched += [(label, q) for q in kept]
        if len(kept) < len(QUANTILES):
            left.append(f"{label} p{', p'.join(str(q) for q in QUANTILES if q not in kept)}: too coarse buckets")
    lines = [f"    not matched: {'; '.join(left)}"] if left else []
    return HistogramMatch({k: observed[k] for k, _ in dict.fromkeys(matched)}, tuple(matched), from_s, window_s), lines


def _resolution(h: Histogram, q: int | None) -> float:
    if q is None:
        return 0.0  # the mean is exact
    found = binned.quantile(h.bounds, h.cumulative, h.count, q / 100)
    if found is None or found[0] <= h.bounds[0]:  # the +Inf bucket, or the first: spread from 0, where none is
        return math.inf
    return binned.resolution(*found)


def _statistic(h: Histogram, q: int | None) -> float:
    if q is None:
        return h.sum / h.count if h.count > 0 else 0.0
    found = binned.quantile(h.bounds, h.cumulative, h.count, q / 100)
    return found[0] if found is not None else (h.bounds[-1] if h.count > 0 else 0.0)  # histogram_quantile's


def _resampled(h: Histogram, rng) -> Histogram:
    counts = binned.per_bucket(h.cumulative, h.count)
    n = round(h.count)
    if n <= 0:
        return h
    drawn = rng.multinomial(n, np.clip(counts, 0, None) / max(counts.sum(), 1e-12))
    lower = np.concatenate([[0.0], h.bounds])
    middle = np.concatenate([(lower[:-1] + np.asarray(h.bounds)) / 2, [h.bounds[-1]]])
    total = h.sum + float(np.sum((drawn - counts) * middle))
    return Histogram(h.bounds, np.cumsum(drawn)[:-1].astype(np.float64), float(n), max(total, 0.0))


def in_window(recorder, from_s: float, window_s: float) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The simulated requests that end in the window, and the TTFTs of those whose first token comes in it (vLLM
    observes a TTFT at the first token, the rest at the end)."""
    every = recorder.requests.view()
    ended = (every["finished_s"] >= from_s) & (every["finished_s"] <= from_s + window_s)
    first = (every["first_token_s"] >= from_s) & (every["first_token_s"] <= from_s + window_s)
    return {k: v[ended] for k, v in every.items()}, every["first_token_s"][first] - every["arrival_s"][first]


def simulated_histograms(recorder, like: dict[str, Histogram], from_s: float, window_s: float) -> dict:
    """The simulation's requests in the window (and every gap) in the buckets of the observed histograms `like`."""
    req, ttft = in_window(recorder, from_s, window_s)
    multi = req["output_tokens"] > 1
    per_request = {
        "TTFT": ttft,
        "TPOT": (req["finished_s"][multi] - req["first_token_s"][multi]) / (req["output_tokens"][multi] - 1),
        "E2E": req["finished_s"] - req["arrival_s"],
        "QUEUE": req["first_scheduled_s"] - req["arrival_s"],
        "PREFILL": req["first_token_s"] - req["first_scheduled_s"],
        "DECODE": req["finished_s"] - req["first_token_s"],
    }
    out = {}
    for label, h in like.items():
        if label == "ITL":
            itl = recorder.itl
            counts = gap_cumulative(itl, h.bounds)
            out[label] = Histogram(h.bounds, np.asarray(counts, dtype=np.float64), float(len(itl)), itl.sum_s)
        else:
            values = per_request[label]
            out[label] = Histogram(
                h.bounds, binned.cumulative_at(values, h.bounds), float(len(values)), float(values.sum())
            )
    return out


@dataclass(frozen=True)
class WithHistograms:
    """A bench replay (vllm_fit.Replay) whose requests a scrape window also counted: its statistics and the
    window's phase histograms', matched together."""

    base: object
    match: HistogramMatch
    source: str  # the scrape's file name, in the labels

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def scenario(self):
        return self.base.scenario

    @property
    def facts(self):
        return self.base.facts

    def measured(self) -> tuple[np.ndarray, list[str]]:
        (a, la), (b, lb) = self.base.measured(), self.match.measured()
        return np.concatenate([a, b]), la + [f"{label} ({self.source})" for label in lb]

    def predicted(self, recorder) -> np.ndarray:
        return np.concatenate([self.base.predicted(recorder), self.match.predicted(recorder)])

    def resolution(self) -> np.ndarray:
        return np.concatenate([self.base.resolution(), self.match.resolution()])

    def bootstrap(self, recorder, rng) -> np.ndarray:
        return np.hstack([self.base.bootstrap(recorder, rng), self.match.bootstrap(recorder, rng)])
