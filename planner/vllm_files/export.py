"""A run's figures in vLLM's two formats, beside summary.json: `vllm_bench.json` (what `vllm bench serve
--save-result --save-detailed` writes) and `vllm_metrics.prom` (the server's `/metrics` text after the run).

What each holds that is not exactly vLLM's, because the recorder does not keep it:
- `itls` (per request): each request's mean gap (its TPOT) repeated output_tokens - 1 times. The recorder keeps
  every gap in one histogram, not per request, so TTFT + sum(itls) is the request's E2E exactly, as vLLM's
  tools compute it, but the spread of one request's gaps is not there; the .prom's ITL histogram has every gap.
- `vllm:inter_token_latency_seconds`: rebinned from the recorder's gap histogram (sim/statistics.py), whose
  buckets are 0.2% wide: a gap within 0.1% of a boundary may sit in the neighbouring bucket.
- every sample's timestamp is the scrape's time in the run (ms; the run starts at 0, the Unix epoch, its
  `process_start_time_seconds`): scrape_series writes what a Prometheus server scraping the engine keeps, each
  window between two of them of known length. A scrape during the run has no inter-token gaps (the recorder keeps
  them for the whole run), and its gauges are the last step's (gauges_at).
- not written: the prefix cache's counters (not counted per run); the queue, inference and prefill times where
  the executor did not record each request's first scheduled step.
A run of more than MAX_DETAILED_TOKENS output tokens writes the summary form, as vLLM without --save-detailed.
"""

from __future__ import annotations

import json

import numpy as np

from planner.vllm_files import names
from sim.metrics import Recorder, per_request_latencies_ms

BENCH_FILE, METRICS_FILE = "vllm_bench.json", "vllm_metrics.prom"
MAX_DETAILED_TOKENS = 500_000  # per-request gap lists beyond this would make a file of over 10 MB


def bench_result(summary: dict, recorder: Recorder, with_itls: bool = True) -> dict:
    """The bench-serve result JSON of a run (vllm/benchmarks/serve.py's keys and units: lists in seconds,
    statistics in ms); `with_itls` False leaves the per-request gap lists out (bench_json writes them)."""
    scenario = summary["scenario"]
    arrival = scenario["workload"]["arrival"]
    requests = _requests(recorder)
    lat = per_request_latencies_ms(requests)
    result = {
        "backend": "planner",
        "label": f"planner {summary['mode']}",
        "model_id": scenario["model"]["name"],
        "tokenizer_id": scenario["model"]["name"],
        "num_prompts": summary["num_requests"],
        "request_rate": arrival["rate"] if arrival["process"] not in ("closed",) and arrival["rate"] else "inf",
        "burstiness": arrival["burstiness"],
        "max_concurrency": arrival["concurrency"] if arrival["process"] == "closed" else None,
        "duration": summary["duration_s"],
        "completed": summary["completed"],
        "failed": summary["num_rejected"],
        "total_input_tokens": summary["total_input_tokens"],
        "total_output_tokens": summary["total_output_tokens"],
        "request_throughput": summary["request_throughput"],
        "request_goodput": summary["goodput"],
        "output_throughput": summary["output_throughput"],
        "total_token_throughput": summary["total_token_throughput"],
    }
    for stat in names.BENCH_STATS:
        result[f"mean_{stat}_ms"] = summary[f"mean_{stat}_ms"]
        result[f"median_{stat}_ms"] = summary[f"median_{stat}_ms"]
        if stat != "itl":
            values = lat[stat]
            result[f"std_{stat}_ms"] = float(np.std(values)) if len(values) else None
        for p in names.BENCH_PERCENTILES:
            result[f"p{p}_{stat}_ms"] = summary[f"p{p}_{stat}_ms"]
    if detailed(requests):
        result |= _detailed(requests, lat, with_itls)
    return result


def detailed(requests: dict[str, np.ndarray]) -> bool:
    return int(requests["output_tokens"].sum()) <= MAX_DETAILED_TOKENS


def _requests(recorder: Recorder) -> dict[str, np.ndarray]:
    requests = recorder.requests.view()
    order = np.argsort(requests["arrival_s"], kind="stable")  # as bench serve lists them: in sending order
    return {name: column[order] for name, column in requests.items()}


def _mean_gaps_s(requests: dict[str, np.ndarray], lat: dict[str, np.ndarray]) -> list[tuple[float, int]]:
    """Per request: its mean gap (its TPOT, seconds) and how many gaps it had."""
    gap_s = np.zeros(len(requests["output_tokens"]))
    gap_s[lat["tpot_mask"]] = lat["tpot"] / 1e3
    return [(g, max(int(n) - 1, 0)) for g, n in zip(gap_s.tolist(), requests["output_tokens"].tolist())]


def _detailed(requests: dict[str, np.ndarray], lat: dict[str, np.ndarray], with_itls: bool) -> dict:
    count = len(requests["output_tokens"])
    gaps = {"itls": [[g] * n for g, n in _mean_gaps_s(requests, lat)]} if with_itls else {}
    return {
        "input_lens": requests["prompt_tokens"].tolist(),
        "output_lens": requests["output_tokens"].tolist(),
        "ttfts": (lat["ttft"] / 1e3).tolist(),
        **gaps,
        "start_times": requests["arrival_s"].tolist(),
        "generated_texts": [""] * count,  # the engine's tokens are not text (random weights, no tokenizer)
        "errors": [""] * count,
    }


def metrics_text(summary: dict, recorder: Recorder, until_s: float | None = None) -> str:
    """The Prometheus text a scrape of vLLM's /metrics would give after the run, one engine (`engine="0"`); with
    `until_s`, at that time of the run (scrape_series)."""
    scenario = summary["scenario"]
    labels = f'model_name="{_escaped(scenario["model"]["name"])}",engine="0"'
    everyone = _requests(recorder)
    end_s = float(everyone["finished_s"].max(initial=0.0)) if until_s is None else until_s
    requests = {k: v[everyone["finished_s"] <= end_s] for k, v in everyone.items()}  # vLLM observes at the end
    lat = per_request_latencies_ms(requests)
    first = everyone["first_token_s"] <= end_s  # ... but TTFT at the first token
    lat["ttft"] = (everyone["first_token_s"][first] - everyone["arrival_s"][first]) * 1e3
    max_len = int(scenario["max_model_len"])
    out: list[str] = []
    _histogram(
        out, names.TTFT, "Histogram of time to first token in seconds.", labels, lat["ttft"] / 1e3, names.TTFT_BUCKETS_S
    )
    if until_s is None:  # the recorder keeps the gaps of the whole run only
        _gap_histogram(out, labels, recorder)
    _histogram(
        out,
        names.TPOT,
        "Histogram of time_per_output_token_seconds per request.",
        labels,
        lat["tpot"] / 1e3,
        names.ITL_BUCKETS_S,
    )
    _histogram(
        out,
        names.E2E,
        "Histogram of e2e request latency in seconds.",
        labels,
        lat["e2el"] / 1e3,
        names.REQUEST_LATENCY_BUCKETS_S,
    )
    for name, (help_text, values) in _phases(requests).items():
        _histogram(out, name, help_text, labels, values, names.REQUEST_LATENCY_BUCKETS_S)
    buckets = names.build_1_2_5_buckets(max_len)
    _histogram(
        out, names.PROMPT_TOKENS, "Number of prefill tokens processed.", labels, requests["prompt_tokens"], buckets
    )
    _histogram(
        out,
        names.GENERATION_TOKENS,
        "Number of generation tokens processed.",
        labels,
        requests["output_tokens"],
        buckets,
    )
    counters = {
        "vllm:prompt_tokens_total": int(requests["prompt_tokens"].sum()),
        "vllm:generation_tokens_total": int(requests["output_tokens"].sum()),
        "vllm:num_preemptions_total": int(summary["num_preemptions"]),
    }
    for name, value in counters.items():
        base = name.removesuffix("_total")
        out += [f"# TYPE {base} counter", f"{name}{{{labels}}} {float(value)!r}"]
    # Every reply is forced to its length (EOS ignored): vLLM's finished_reason "length"
    success = len(requests["request_id"])
    out += [
        "# TYPE vllm:request_success counter",
        f'vllm:request_success_total{{{labels},finished_reason="length"}} {float(success)!r}',
    ]
    for gauge, value in gauges_at(recorder, everyone, end_s, until_s is None).items():
        out += [f"# TYPE {gauge} gauge", f"{gauge}{{{labels}}} {value!r}"]
    engine = scenario["engine"]
    info = {
        "block_size": engine["block_size"],
        "cache_dtype": engine["kv_cache_dtype"],
        "enable_prefix_caching": engine["enable_prefix_caching"],
        "engine": "0",
        "gpu_memory_utilization": engine["gpu_memory_utilization"],
        "num_gpu_blocks": recorder.num_gpu_blocks,
    }
    info_labels = ",".join(f'{k}="{v}"' for k, v in info.items())
    out += [f"# TYPE {names.CACHE_CONFIG_INFO} gauge", f"{names.CACHE_CONFIG_INFO}{{{info_labels}}} 1.0"]
    # The simulated server starts at time 0 (the Unix epoch) and is scraped as its last request ends: every
    # sample carries that time (ms), so that this one scrape is a window of known length (prom_read.Scrape).
    out += [f"# TYPE {names.START_TIME} gauge", f"{names.START_TIME} 0.0"]
    end_ms = f" {round(end_s * 1e3)}"
    return "\n".join(line if line.startswith("#") else line + end_ms for line in out) + "\n"


def _phases(requests: dict[str, np.ndarray]) -> dict[str, tuple[str, np.ndarray]]:
    """Each request's times in vLLM's phases (vllm/v1/metrics/stats.py, update_from_finished_request: queued from
    arrival to its first scheduled step, inference from there to its last token, prefill to its first token,
    decode from its first token to its last), in vLLM's order; only decode where the executor did not record
    the first scheduled step."""
    scheduled, first, last = requests["first_scheduled_s"], requests["first_token_s"], requests["finished_s"]
    decode = {names.DECODE: ("Histogram of time spent in DECODE phase for request.", last - first)}
    if not np.all(np.isfinite(scheduled)):
        return decode
    return {
        names.QUEUE: ("Histogram of time spent in WAITING phase for request.", scheduled - requests["arrival_s"]),
        names.INFERENCE: ("Histogram of time spent in RUNNING phase for request.", last - scheduled),
        names.PREFILL: ("Histogram of time spent in PREFILL phase for request.", first - scheduled),
        **decode,
    }


def gauges_at(recorder: Recorder, requests: dict[str, np.ndarray], at_s: float, after_run: bool) -> dict[str, float]:
    """The gauges at `at_s`. After the run all idle. During it, where the recorder kept one engine's steps (all of
    them, in memory), those of the last step begun by then (the scheduler's running and waiting queues after it,
    and the share of the KV cache's blocks in use, as vLLM's scheduler stats give them); else (steps.csv written
    as the run went, several engines) from the requests' times (sent and not yet scheduled: waiting; scheduled and
    not finished: running), without the KV cache's use."""
    if after_run:
        return {names.RUNNING: 0.0, names.WAITING: 0.0, names.KV_USAGE: 0.0}
    steps = recorder.step_rows() if recorder.record_steps and recorder.steps_sink is None else {}
    if len(steps.get("start_s", ())) and np.all(steps["replica"] == 0):
        order = np.argsort(steps["start_s"], kind="stable")
        i = int(np.searchsorted(steps["start_s"][order], at_s, side="right")) - 1
        if i < 0:
            return {names.RUNNING: 0.0, names.WAITING: 0.0, names.KV_USAGE: 0.0}
        row = order[i]
        return {
            names.RUNNING: float(steps["num_running"][row]),
            names.WAITING: float(steps["num_waiting"][row]),
            names.KV_USAGE: float(steps["kv_blocks_used"][row]) / recorder.num_gpu_blocks,
        }
    scheduled = requests["first_scheduled_s"]
    scheduled = np.where(np.isfinite(scheduled), scheduled, requests["first_token_s"])
    sent, started = requests["arrival_s"] <= at_s, scheduled <= at_s
    running = started & (requests["finished_s"] > at_s)
    return {names.RUNNING: float(running.sum()), names.WAITING: float((sent & ~started).sum())}


def scrape_series(summary: dict, recorder: Recorder, interval_s: float) -> list[str]:
    """Scrapes of the run every `interval_s` from its start (the first at 0), and one as it ends: what a
    Prometheus server scraping the engine keeps. Without the inter-token gaps except in the last (the recorder
    keeps them for the whole run only)."""
    end_s = float(recorder.requests.view()["finished_s"].max(initial=0.0))
    times = np.arange(0.0, end_s, interval_s)
    return [metrics_text(summary, recorder, float(t)) for t in times] + [metrics_text(summary, recorder)]


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _bound(le: float) -> str:
    return repr(float(le))


def _histogram(out: list[str], name: str, help_text: str, labels: str, values, buckets) -> None:
    values = np.sort(np.asarray(values, dtype=np.float64))
    counts = np.searchsorted(values, np.asarray(buckets, dtype=np.float64), side="right")
    _write_histogram(out, name, help_text, labels, buckets, counts.tolist(), len(values), float(values.sum()))


def _gap_histogram(out: list[str], labels: str, recorder: Recorder) -> None:
    """Every inter-token gap, from the recorder's log buckets: each counted at its bucket's geometric middle."""
    itl = recorder.itl
    count = len(itl)  # bins the pending gaps
    counts = gap_cumulative(itl, names.ITL_BUCKETS_S)
    _write_histogram(
        out,
        names.ITL,
        "Histogram of inter-token latency in seconds.",
        labels,
        names.ITL_BUCKETS_S,
        counts,
        count,
        itl.sum_s if count else 0.0,
    )


def gap_cumulative(itl, bounds_s) -> list[int]:
    """The recorder's gaps (sim.statistics.GapHistogram) at or below each bound, each gap counted at its log
    bucket's geometric middle."""
    len(itl)  # bins the pending gaps
    middles_s = itl.MIN_S * itl.RATIO ** (np.arange(itl.NUM_BUCKETS) + 0.5)
    cumulative = np.cumsum(itl.counts)
    at = np.searchsorted(middles_s, np.asarray(bounds_s, dtype=np.float64), side="right") - 1
    return [int(cumulative[i]) if i >= 0 else 0 for i in at]


def _write_histogram(out, name, help_text, labels, buckets, counts, count, total) -> None:
    out += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    out += [f'{name}_bucket{{{labels},le="{_bound(le)}"}} {float(n)!r}' for le, n in zip(buckets, counts)]
    out += [f'{name}_bucket{{{labels},le="+Inf"}} {float(count)!r}', f"{name}_count{{{labels}}} {float(count)!r}"]
    out.append(f"{name}_sum{{{labels}}} {float(total)!r}")


def bench_json(summary: dict, recorder: Recorder) -> str:
    """bench_result as JSON text, its `itls` written as repeated text (json.dumps of the lists cost more than
    the simulation of a few thousand requests)."""
    text = json.dumps(bench_result(summary, recorder, with_itls=False))
    requests = _requests(recorder)
    if not detailed(requests):
        return text + "\n"
    lat = per_request_latencies_ms(requests)
    lists = ", ".join("[" + ", ".join([json.dumps(g)] * n) + "]" for g, n in _mean_gaps_s(requests, lat))
    return text[:-1] + f', "itls": [{lists}]}}\n'
