"""What a run records (per step, per request, every inter-token gap) and the summary computed from it.

Shared by both modes. Key names and definitions follow vLLM's `bench serve`, so numbers compare one to
one: TPOT = (E2E - TTFT) / (output_tokens - 1), ITL = every gap between consecutive tokens of a request,
percentiles as numpy.percentile. Memory is bounded by the requests, not by the tokens:
- per-request values (TTFT, TPOT, E2E) are kept exactly, one row per request, and their percentiles are exact;
- inter-token gaps, one per output token (hundreds of millions at 1,000,000 requests), go into `GapHistogram`:
  log buckets 0.2% wide, so an ITL percentile is within 0.1% of numpy.percentile over every gap; the
  count, mean, min and max stay exact;
- step rows are kept only when asked (`record_steps`), and with a `steps_sink` they leave memory in chunks
  as the run goes (steps.csv is written as it runs), a decimated copy staying for the plots.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.columns import Columns
from sim.config import SloConfig
from sim.disk_tier import disk_tiers_summary
from sim.host_tier import HostTier, host_tiers_summary
from sim.prefix_stats import PrefixCacheCounts
from sim.request import Request
from sim.speculation import SpecDecodeCounts
from sim.statistics import BusyTotals, GapHistogram, percentile
from sim.step_rows import StepRows, WindowRecord

STEP_COLUMNS = {
    "start_s": np.float64,
    "duration_s": np.float64,
    "num_running": np.int32,
    "num_waiting": np.int32,
    "num_prefill_tokens": np.int32,  # prompt (or recomputed) tokens in the step
    "num_decode_requests": np.int32,  # requests generating one token
    "num_sampled": np.int32,  # rows whose logits are sampled
    "sum_context_tokens": np.int64,  # sum over scheduled requests of their context after the step
    "attention_pairs": np.int64,  # (query, key) pairs under the causal mask
    "kv_blocks_used": np.int32,
    "num_preemptions": np.int32,
    "replica": np.int32,  # which engine, when hardware.replicas > 1
    "num_tokens": np.int32,  # tokens computed in the step (prefill + decode)
    "num_seqs": np.int32,  # requests scheduled in the step (num_running is counted after it)
    # The step's two sides, for calibration: host = scheduling, input and output handling on the CPU;
    # device = the forward. Simulated: the cost model's terms (duration_s = their sum, or their max under
    # async scheduling). Measured: wall time of schedule()+update() and of the runner's execute().
    "host_s": np.float64,
    "device_s": np.float64,
}
REQUEST_COLUMNS = {
    "request_id": np.int64,
    "arrival_s": np.float64,
    "first_token_s": np.float64,
    "finished_s": np.float64,
    "prompt_tokens": np.int64,
    "output_tokens": np.int64,
    "preemptions": np.int32,
    "first_scheduled_s": np.float64,  # the start of its first step (NaN where the executor does not say)
}
PERCENTILES = (50, 90, 99)
STEP_CHUNK_ROWS = 1 << 16  # with a steps_sink: rows handed over at a time (about 4 MB)
PLOT_STEP_ROWS = 1 << 18  # with a steps_sink: the most rows kept for the plots (every 2^k-th step)
FINISHED_BATCH = 4096  # finished requests' rows kept as tuples before they join the request columns


class Recorder:
    """Collects a run. `record_steps=False` keeps only running totals of the per-step series.

    `steps_sink`, if given, receives the step rows in chunks of STEP_CHUNK_ROWS as the run goes (in the
    order steps end: by time within each replica) and the recorder keeps only every 2^k-th row for the plots,
    k growing so that at most PLOT_STEP_ROWS stay: memory stays flat however long the run.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        record_steps: bool = True,
        steps_sink: Callable[[dict[str, np.ndarray]], None] | None = None,
    ) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.record_steps = record_steps or steps_sink is not None
        self.steps_sink = steps_sink
        self.plot_steps = Columns(STEP_COLUMNS)  # with a sink: every plot_stride-th step
        self.plot_stride = 1
        self.num_spilled = 0
        self.steps = StepRows(STEP_COLUMNS)  # rows kept as they come, put into columns when read
        self._requests = Columns(REQUEST_COLUMNS)
        # Finished requests' rows as tuples, put into the columns FINISHED_BATCH at a time: one numpy element
        # assignment per field costs more than the whole tuple.
        self._finished: list[tuple] = []
        self.itl = GapHistogram()  # every inter-token gap, in bounded memory
        self.num_steps = 0
        self.totals = BusyTotals(block_size)  # busy seconds, blocks and slots used over them, the peak blocks
        self.num_preemptions = 0
        # Speculative decoding's counts (sim/speculation.py), shared by every replica's scheduler; None: off
        self.spec: SpecDecodeCounts | None = None
        # The prefix cache's hits at admission, over every replica (sim/prefix_stats.py); None: not reported
        self.prefix: PrefixCacheCounts | None = None
        self.host_tiers: list[HostTier] = []  # every replica's host KV tier (engine.kv_offload)

    def step(
        self,
        *,
        replica: int,
        start_s: float,
        duration_s: float,
        num_running: int,
        num_waiting: int,
        num_prefill_tokens: int,
        num_decode_requests: int,
        num_sampled: int,
        sum_context_tokens: int,
        attention_pairs: int,
        kv_blocks_used: int,
        num_preemptions: int,
        tokens_held: int,
        num_tokens: int = 0,
        num_seqs: int = 0,
        host_s: float = 0.0,
        device_s: float = 0.0,
    ) -> None:
        self.num_steps += 1
        self.totals.add_step(duration_s, kv_blocks_used, tokens_held)
        self.num_preemptions += num_preemptions
        if self.record_steps:
            self.steps.add_step(  # in STEP_COLUMNS' order
                (
                    start_s,
                    duration_s,
                    num_running,
                    num_waiting,
                    num_prefill_tokens,
                    num_decode_requests,
                    num_sampled,
                    sum_context_tokens,
                    attention_pairs,
                    kv_blocks_used,
                    num_preemptions,
                    replica,
                    num_tokens,
                    num_seqs,
                    host_s,
                    device_s,
                )
            )
            self._maybe_spill()

    def _maybe_spill(self) -> None:
        if self.steps_sink is not None and self.steps.size >= STEP_CHUNK_ROWS:
            self.spill_steps()

    def spill_steps(self) -> None:
        """Hand the buffered step rows to the sink and keep every plot_stride-th (by overall row number)."""
        rows = self.steps.view()
        if self.steps_sink is None or self.steps.size == 0:
            return
        self.steps_sink(rows)
        first = (-self.num_spilled) % self.plot_stride
        self.plot_steps.extend(**{name: column[first :: self.plot_stride] for name, column in rows.items()})
        self.num_spilled += self.steps.size
        self.steps.clear()
        while self.plot_steps.size > PLOT_STEP_ROWS:
            self.plot_steps.keep_every_other()
            self.plot_stride *= 2

    def step_rows(self) -> dict[str, np.ndarray]:
        """The step rows for the plots: all of them, or with a sink the kept sample (after a last spill)."""
        if self.steps_sink is None:
            return self.steps.view()
        self.spill_steps()
        rows = self.plot_steps.view()
        if self.plot_stride > 1:  # a sample cannot count tokens: the plots then estimate them from the requests
            del rows["num_sampled"]
        return rows

    def decode_window(
        self,
        *,
        replica: int,
        end_s: np.ndarray,
        duration_s: np.ndarray,
        num_rows: np.ndarray | int,
        num_running_after: int,
        num_waiting: int,
        num_waiting_after: int,
        sum_context_tokens: np.ndarray,
        kv_blocks_used: np.ndarray,
        tokens_held: np.ndarray,
        host_s: np.ndarray | float = 0.0,
        device_s: np.ndarray | float = 0.0,
    ) -> None:
        """k pure-decode steps at once: each of a step's num_rows requests (one int: every step's) decodes one
        token, and those of the next step are left after it (fewer when some sampled their last);
        num_running_after are left after the last. For a decode token the context it attends over is
        its whole context, so attention pairs = context tokens, and the tokens held are the context less shared
        prefix blocks' repeats. Only after the last step can an arrival be in the queue (it ends the window),
        so the queue holds num_waiting requests after every step but the last (none, or those blocked at its
        head), num_waiting_after after the last."""
        self.num_steps += len(duration_s)
        self.totals.add_steps(duration_s, kv_blocks_used, tokens_held)
        if self.record_steps:
            self.steps.add_window(
                WindowRecord(
                    replica,
                    end_s,
                    duration_s,
                    num_rows,
                    num_running_after,
                    num_waiting,
                    num_waiting_after,
                    sum_context_tokens,
                    kv_blocks_used,
                    host_s,
                    device_s,
                )
            )
            self._maybe_spill()

    def token_gaps(self, gaps_s: np.ndarray | list[float], times: int | np.ndarray = 1) -> None:
        self.itl.add_many(gaps_s, times)

    def token_gaps_since(self, now_s: float, since_s: list[float], counts: list[int]) -> None:
        """Tokens sampled at now_s, counts[i] of them after a previous token at since_s[i]."""
        self.itl.add_counted([now_s - last_s for last_s in since_s], counts)

    def finished(self, request: Request) -> None:
        if self.prefix is not None and self.prefix.host_hit_tokens is not None:  # the TTFT's split: with a host tier
            self.prefix.finished(request)
        self._finished.append(
            (
                request.request_id,
                request.arrival_s,
                request.first_token_s,
                request.finished_s,
                request.num_prompt_tokens,
                request.num_output_tokens,
                request.num_preemptions,
                request.first_scheduled_s,
            )
        )
        if len(self._finished) >= FINISHED_BATCH:
            self._flush_finished()

    @property
    def requests(self) -> Columns:
        """A row per finished request (REQUEST_COLUMNS), in the order they finished."""
        self._flush_finished()
        return self._requests

    def _flush_finished(self) -> None:
        if self._finished:
            columns = zip(*self._finished)  # the tuples' fields, in REQUEST_COLUMNS order
            self._requests.extend(
                **{name: np.array(values, dtype) for (name, dtype), values in zip(REQUEST_COLUMNS.items(), columns)}
            )
            self._finished = []


# The per-request latencies a summary reports, in the order it lists them (`mean_{key}_ms`, `median_{key}_ms`,
# `p{N}_{key}_ms`): time to first token, time per output token, inter-token latency, end to end.
LATENCY_KEYS = ("ttft", "tpot", "itl", "e2el")


def _stats(name: str, values_ms: np.ndarray | GapHistogram) -> dict[str, float]:
    if len(values_ms) == 0:
        return {
            f"mean_{name}_ms": float("nan"),
            f"median_{name}_ms": float("nan"),
            **{f"p{p}_{name}_ms": float("nan") for p in PERCENTILES},
        }
    out = {f"mean_{name}_ms": _percentile(values_ms, "mean"), f"median_{name}_ms": _percentile(values_ms, "p50")}
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = _percentile(values_ms, f"p{p}")
    return out


def per_request_latencies_ms(requests: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ttft = (requests["first_token_s"] - requests["arrival_s"]) * 1e3
    e2el = (requests["finished_s"] - requests["arrival_s"]) * 1e3
    out_tokens = requests["output_tokens"]
    multi = out_tokens > 1
    tpot = (e2el[multi] - ttft[multi]) / (out_tokens[multi] - 1)
    return {"ttft": ttft, "tpot": tpot, "e2el": e2el, "tpot_mask": multi}


def _percentile(values: np.ndarray | GapHistogram, key: str) -> float:
    """`mean` or `pNN` of per-request values in ms (exact) or of the gap histogram (seconds -> ms)."""
    if len(values) == 0:
        return float("nan")
    if isinstance(values, GapHistogram):
        if key == "mean":
            return values.mean_s() * 1e3
        return float(values.percentiles_s([float(key.removeprefix("p"))])[0]) * 1e3
    if key == "mean":
        return float(np.mean(values))
    return percentile(values, float(key.removeprefix("p")))


def slo_report(lat: dict[str, np.ndarray], itl: GapHistogram, slo: SloConfig, duration_s: float) -> dict:
    """Each SLO bound against the measured percentile, and goodput as vLLM's bench defines it: completed
    requests per second whose own TTFT, TPOT and E2E are within every bound set for them."""
    series = {"ttft_ms": lat["ttft"], "tpot_ms": lat["tpot"], "e2el_ms": lat["e2el"], "itl_ms": itl}
    checks = []
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        for key, bound in getattr(slo, metric).items():
            value = _percentile(series[metric], key)
            # No value (e.g. TPOT when every reply is one token): the bound can be neither met nor missed.
            met = None if np.isnan(value) else bool(value <= bound)
            check = {"metric": metric, "stat": key, "bound_ms": bound, "value_ms": value, "met": met}
            if metric == "itl_ms" and key != "mean" and abs(value - bound) <= GapHistogram.RELATIVE_ERROR * value:
                # An ITL percentile is the histogram's, within RELATIVE_ERROR of the exact one: this close to the
                # bound the exact one may fall on its other side (p90 30.455 ms "met" 30.47, exactly 30.478).
                check["within_histogram_error"] = True
            checks.append(check)
    good = np.ones(len(lat["ttft"]), dtype=bool)
    for metric in ("ttft_ms", "e2el_ms"):
        for bound in getattr(slo, metric).values():
            good &= series[metric] <= bound
    if slo.tpot_ms:
        tpot_full = np.zeros(len(good))
        tpot_full[lat["tpot_mask"]] = lat["tpot"]
        for bound in slo.tpot_ms.values():
            good &= tpot_full <= bound
    has_slo = any(getattr(slo, m) for m in ("ttft_ms", "tpot_ms", "e2el_ms"))
    goodput = float(good.sum() / duration_s) if has_slo and duration_s > 0 else None
    return {"checks": checks, "goodput": goodput, "all_met": all(c["met"] is not False for c in checks)}


def summarize(rec: Recorder, slo: SloConfig) -> dict:
    """The summary with vLLM bench serve's key names."""
    req, totals = rec.requests.view(), rec.totals.read()
    completed = len(req["request_id"])
    duration_s = float(req["finished_s"].max()) if completed else 0.0
    lat = per_request_latencies_ms(req)
    input_tokens = int(req["prompt_tokens"].sum())
    output_tokens = int(req["output_tokens"].sum())
    per_s = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: float("nan"))
    summary = {
        "completed": completed,
        "duration_s": duration_s,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": per_s(completed),
        "output_throughput": per_s(output_tokens),
        "total_token_throughput": per_s(input_tokens + output_tokens),
        **_stats("ttft", lat["ttft"]),
        **_stats("tpot", lat["tpot"]),
        **_stats("itl", rec.itl),
        **_stats("e2el", lat["e2el"]),
        "num_steps": rec.num_steps,
        "busy_s": totals.busy_s,
        "kv_cache_utilization": {
            "mean": totals.block_seconds / totals.busy_s / rec.num_gpu_blocks if totals.busy_s else 0.0,
            "peak": totals.peak_blocks / rec.num_gpu_blocks,
        },
        # Tokens held / slots in the blocks handed out, time-weighted: what paging saves.
        "kv_slot_utilization": totals.slot_seconds / totals.busy_s if totals.busy_s else 0.0,
        "num_preemptions": rec.num_preemptions,
    }
    slo_result = slo_report(lat, rec.itl, slo, duration_s)
    summary["goodput"] = slo_result["goodput"]
    summary["slo"] = slo_result
    if rec.spec is not None:
        summary["spec_decode"] = rec.spec.to_dict()
    if rec.prefix is not None:
        summary["prefix_cache"] = rec.prefix.to_dict()
    if rec.host_tiers:
        summary["kv_offload"] = host_tiers_summary(rec.host_tiers, rec.prefix)
        if rec.host_tiers[0].disk is not None:
            summary["kv_offload"]["disk"] = disk_tiers_summary([t.disk for t in rec.host_tiers])
    return summary
