"""A window between two timestamped Prometheus scrapes of one server rebuilt as a workload the simulator serves;
what of its histograms the fit matches is planner.calibration.histogram_match's (the Replay protocol of
planner.calibration.vllm_fit).

The workload: a Poisson process (ASSUMED: the counters say how many, not when) of the window's finished requests
(`vllm:e2e_request_latency_seconds`' count: sent uniformly over it, a Poisson process given its count), their
prompt and reply lengths drawn from
`vllm:request_prompt_tokens` and `vllm:request_generation_tokens` (placed in the buckets so that their sum is the
histogram's; prompt and reply paired at random: the histograms do not pair them). A window of a running server
starts busy: the simulation sends requests for WARM_UP_E2E mean latencies before it, and matches only what falls
in the window as vLLM observes it (a request's TTFT when its first token comes, the rest when it ends). The
inter-token gaps are the whole simulation's (the recorder keeps no time per gap), warm-up and drain included.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.calibration.gauge_check import observed_gauges
from planner.calibration.histogram_match import LATENCIES, PHASES, HistogramMatch, histogram_match
from planner.calibration.vllm_replay import trace_scenario
from planner.errors import PlannerError
from planner.vllm_files import binned, names
from planner.vllm_files.prom_read import Histogram, Scrape
from sim.config import ArrivalConfig, Scenario
from sim.engine_facts import EngineFacts

MIN_WINDOW_REQUESTS = 20  # quantiles of fewer requests say little
WARM_UP_E2E = 3  # requests are sent for this many of the window's mean E2E before it: it starts busy


@dataclass(frozen=True)
class ScrapeWindow:
    name: str
    scenario: Scenario
    facts: EngineFacts
    stats: HistogramMatch  # the window's histograms, matched over [from_s, from_s + window_s] of the simulation
    output_tokens: float  # the window's generation tokens
    gauges: dict[str, float]  # at its end (gauge_check.observed_gauges)

    def measured(self) -> tuple[np.ndarray, list[str]]:
        return self.stats.measured()

    def predicted(self, recorder) -> np.ndarray:
        return self.stats.predicted(recorder)

    def resolution(self) -> np.ndarray:
        return self.stats.resolution()

    def bootstrap(self, recorder, rng) -> np.ndarray:
        return self.stats.bootstrap(recorder, rng)


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
    # A Poisson process given its count in the window: that many times uniform over it (and at the rate before)
    warm_up = np.cumsum(rng.exponential(1 / rate, int(warm_up_s * rate * 2) + 10))
    warm_up = warm_up[warm_up <= warm_up_s]
    times = np.concatenate([warm_up, warm_up_s + np.sort(rng.uniform(0, scrape.window_s, requests))])
    top = scenario.max_model_len - 1
    lengths = []
    for name in (names.PROMPT_TOKENS, names.GENERATION_TOKENS):
        h = _required(scrape, name, "the requests' lengths are drawn from it")
        drawn = binned.draw_integers(h.bounds, h.cumulative, h.count, h.sum, top, rng)
        # the window's requests as many as the histogram holds in each bucket (a heavy tail resampled would move
        # the mean by several percent); the warm-up's drawn among them
        mine = drawn if len(drawn) == requests else rng.choice(drawn, requests, replace=len(drawn) < requests)
        lengths.append(np.concatenate([rng.choice(drawn, len(warm_up)), rng.permutation(mine)]))
    prompt, output = lengths
    output = np.maximum(np.minimum(output, scenario.max_model_len - prompt), 1)
    arrival = ArrivalConfig("trace")
    replay = trace_scenario(scenario, times, (prompt, output), arrival, "arrived_at", trace_path, engine)
    stats, not_matched = histogram_match(scrape, LATENCIES + PHASES, warm_up_s, scrape.window_s)
    generated = scrape.histogram(names.GENERATION_TOKENS)
    facts = EngineFacts.of(replay)
    window = ScrapeWindow(scrape.path.name, replay, facts, stats, generated.sum, observed_gauges(scrape))
    said = (
        f"  {scrape.path}: window of {scrape.window_s:,.1f} s, {requests:,} requests finished; ASSUMED: Poisson"
        f" arrivals at {rate:.3g} requests/s (from {warm_up_s:.1f} s before it), prompt and reply lengths drawn"
        f" from their histograms' buckets (means {np.mean(prompt):,.0f} and {np.mean(output):,.0f} tokens), paired"
        " at random; no shared prefix"
    )
    return window, [said, *not_matched]
