"""A window of Prometheus scrapes (two scrapes of one server, or one scrape and the server's start) rebuilt as a
workload the simulator serves, and the statistics of its histograms the fit matches (planner.calibration.vllm_fit's
Replay protocol).

The workload: a Poisson process (ASSUMED: the counters say how many, not when) at the window's finished requests
(`vllm:e2e_request_latency_seconds`' count) over its length, their prompt and reply lengths drawn from
`vllm:request_prompt_tokens` and `vllm:request_generation_tokens` (placed in the buckets so that their sum is the
histogram's; prompt and reply paired at random: the histograms do not pair them). A window of a running server
starts busy: the simulation sends requests for WARM_UP_E2E mean latencies before it, and matches only what falls
in the window as vLLM observes it (a request's TTFT when its first token comes, the rest when it ends). The
inter-token gaps are the whole simulation's (the recorder keeps no time per gap), warm-up and drain included.

The statistics: per histogram (TTFT, TPOT, ITL, E2E), the mean (its `_sum` over its `_count`: exact) and the
10/25/50/75/90th percentiles interpolated within buckets (planner.vllm_files.binned), the simulated requests put
through the same buckets, so that the interpolation's own error is the same on both sides. Quantiles rather than
bucket counts: the relative errors the bench fit uses, and a bucket count moves in jumps of one request where an
interpolated quantile moves with every request that crosses a bound. Each quantile is left open by its bucket's
width (binned.resolution): the fit carries that into the coefficients' standard errors. A quantile the window puts
in the +Inf bucket is not matched (it has no upper bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.calibration.vllm_fit import BOOTSTRAP_SAMPLES, QUANTILES
from planner.calibration.vllm_replay import trace_scenario
from planner.errors import PlannerError
from planner.vllm_files import binned, names
from planner.vllm_files.export import gap_cumulative
from planner.vllm_files.prom_read import Histogram, Scrape
from sim.config import ArrivalConfig, Scenario
from sim.engine_facts import EngineFacts

MATCHED = (("TTFT", names.TTFT), ("TPOT", names.TPOT), ("ITL", names.ITL), ("E2E", names.E2E))
MIN_WINDOW_REQUESTS = 20  # quantiles of fewer requests say little
WARM_UP_E2E = 3  # requests are sent for this many of the window's mean E2E before it: it starts busy


@dataclass(frozen=True)
class ScrapeWindow:
    name: str
    scenario: Scenario
    facts: EngineFacts
    observed: dict[str, Histogram]  # label (TTFT, ...) -> the window's histogram
    matched: tuple[tuple[str, int | None], ...]  # (label, percentile; None: the mean), fixed by the window
    window_s: float
    from_s: float  # the window in the simulation's time: [from_s, from_s + window_s]
    output_tokens: float  # the window's generation tokens

    def measured(self) -> tuple[np.ndarray, list[str]]:
        values = [_statistic(self.observed[label], q) for label, q in self.matched]
        return np.asarray(values), [f"{label} {'mean' if q is None else f'p{q}'}" for label, q in self.matched]

    def predicted(self, recorder) -> np.ndarray:
        hists = simulated_histograms(recorder, self.observed, self.from_s, self.window_s)
        return np.asarray([_statistic(hists[label], q) for label, q in self.matched])

    def resolution(self) -> np.ndarray:
        out = []
        for label, q in self.matched:
            h = self.observed[label]
            found = None if q is None else binned.quantile(h.bounds, h.cumulative, h.count, q / 100)
            out.append(0.0 if found is None else binned.resolution(*found))
        return np.asarray(out)

    def bootstrap(self, recorder, rng) -> np.ndarray:
        """The fit's relative errors over BOOTSTRAP_SAMPLES multinomial resamples of both windows' bucket counts
        (the observed requests and the simulated ones are each a sample of what the engine does; a resampled
        mean moves by the resampled counts at their buckets' middles), less those of the windows as they are."""
        sim = simulated_histograms(recorder, self.observed, self.from_s, self.window_s)
        base = self.predicted(recorder) / self.measured()[0]
        rows = []
        for _ in range(BOOTSTRAP_SAMPLES):
            obs_r = {k: _resampled(h, rng) for k, h in self.observed.items()}
            sim_r = {k: _resampled(h, rng) for k, h in sim.items()}
            ratio = [_statistic(sim_r[k], q) / _statistic(obs_r[k], q) for k, q in self.matched]
            rows.append(np.asarray(ratio) - base)
        return np.asarray(rows)


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
    """The simulated requests that end in the window, and the TTFTs of those whose first token comes in it."""
    every = recorder.requests.view()
    ended = (every["finished_s"] >= from_s) & (every["finished_s"] <= from_s + window_s)
    first = (every["first_token_s"] >= from_s) & (every["first_token_s"] <= from_s + window_s)
    return {k: v[ended] for k, v in every.items()}, every["first_token_s"][first] - every["arrival_s"][first]


def simulated_histograms(recorder, like: dict[str, Histogram], from_s: float, window_s: float) -> dict:
    """The simulation's requests in the window (and every gap) in the buckets of the observed histograms `like`."""
    req, ttft = in_window(recorder, from_s, window_s)
    e2e = req["finished_s"] - req["arrival_s"]
    multi = req["output_tokens"] > 1
    tpot = (req["finished_s"][multi] - req["first_token_s"][multi]) / (req["output_tokens"][multi] - 1)
    per_request = {"TTFT": ttft, "TPOT": tpot, "E2E": e2e}
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


def _required(scrape: Scrape, name: str, why: str) -> Histogram:
    h = scrape.histogram(name)
    if h is None or h.count <= 0:
        raise PlannerError(f"{scrape.path}: {name}: {'absent' if h is None else 'no observation'}: {why}")
    return h


def window_replay(
    scenario: Scenario, scrape: Scrape, index: int, trace_path: Path, engine: dict
) -> tuple[ScrapeWindow, list[str]]:
    """The window as the simulator serves it (the module's rules), and the lines saying what was assumed."""
    if scrape.window_s is None:
        missing = (
            "its samples carry no timestamp"
            if scrape.end_s is None
            else "one scrape: its counters hold the server's whole life, not how its traffic went over it"
        )
        raise PlannerError(
            f"{scrape.path}: {missing}: no window (how many requests over how long); give two timestamped scrapes"
            " of one server, or a folder of periodic ones (docs/calibration-from-vllm.md says how to take them)"
        )
    e2e = _required(scrape, names.E2E, "the window's finished requests are counted there")
    requests = round(e2e.count)
    if requests < MIN_WINDOW_REQUESTS:
        raise PlannerError(
            f"{scrape.path}: {names.E2E}_count = {requests}: the window finished fewer than {MIN_WINDOW_REQUESTS}"
            " requests, too few to fit (take the scrapes further apart)"
        )
    rng = np.random.default_rng([scenario.workload.seed, index])
    rate = requests / scrape.window_s
    warm_up_s = WARM_UP_E2E * e2e.sum / e2e.count
    gaps = rng.exponential(1 / rate, int((warm_up_s + scrape.window_s) * rate * 1.5) + 10)
    times = np.cumsum(gaps)
    times = times[times <= warm_up_s + scrape.window_s]
    top = scenario.max_model_len - 1
    lengths = []
    for name in (names.PROMPT_TOKENS, names.GENERATION_TOKENS):
        h = _required(scrape, name, "the requests' lengths are drawn from it")
        drawn = binned.draw_integers(h.bounds, h.cumulative, h.count, h.sum, top, rng)
        lengths.append(rng.choice(drawn, len(times), replace=len(drawn) < len(times)))
    prompt, output = lengths
    output = np.maximum(np.minimum(output, scenario.max_model_len - prompt), 1)
    arrival = ArrivalConfig("trace")
    replay = trace_scenario(scenario, times, (prompt, output), arrival, "arrived_at", trace_path, engine)
    observed = {label: h for label, name in MATCHED if (h := scrape.histogram(name)) is not None and h.count > 0}
    matched = []
    for label, h in observed.items():
        matched.append((label, None))
        matched += [(label, q) for q in QUANTILES if binned.quantile(h.bounds, h.cumulative, h.count, q / 100)]
    generated = scrape.histogram(names.GENERATION_TOKENS)
    window = ScrapeWindow(
        scrape.path.name,
        replay,
        EngineFacts.of(replay),
        observed,
        tuple(matched),
        scrape.window_s,
        warm_up_s,
        generated.sum,
    )
    said = (
        f"  {scrape.path}: window of {scrape.window_s:,.1f} s, {requests:,} requests finished; ASSUMED: Poisson"
        f" arrivals at {rate:.3g} requests/s (from {warm_up_s:.1f} s before it), prompt and reply lengths drawn"
        f" from their histograms' buckets (means {np.mean(prompt):,.0f} and {np.mean(output):,.0f} tokens), paired"
        " at random; no shared prefix"
    )
    return window, [said]
