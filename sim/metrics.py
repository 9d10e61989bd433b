"""What a run records (per step, per request, every inter-token gap) and the summary computed from it.

Shared by both modes. Key names and definitions follow vLLM's `bench serve`, so numbers compare one to
one: TPOT = (E2E - TTFT) / (output_tokens - 1), ITL = every gap between consecutive tokens of a request,
percentiles as numpy.percentile. Columns live in growable numpy arrays: 100,000 requests and millions of
steps must fit in well under a gigabyte.
"""

from __future__ import annotations

from array import array

import numpy as np

from sim.config import SloConfig
from sim.request import Request

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
}
REQUEST_COLUMNS = {
    "request_id": np.int64,
    "arrival_s": np.float64,
    "first_token_s": np.float64,
    "finished_s": np.float64,
    "prompt_tokens": np.int64,
    "output_tokens": np.int64,
    "preemptions": np.int32,
}
PERCENTILES = (50, 90, 99)


class Columns:
    """A table of typed numpy columns that grows by doubling."""

    def __init__(self, dtypes: dict[str, type], capacity: int = 1024) -> None:
        self.size = 0
        self.data = {name: np.empty(capacity, dtype) for name, dtype in dtypes.items()}

    def _grow(self, needed: int) -> None:
        capacity = len(next(iter(self.data.values())))
        if needed > capacity:
            capacity = max(needed, 2 * capacity)
            for name, column in self.data.items():
                grown = np.empty(capacity, column.dtype)
                grown[: self.size] = column[: self.size]
                self.data[name] = grown

    def append(self, **row: float) -> None:
        self._grow(self.size + 1)
        for name, value in row.items():
            self.data[name][self.size] = value
        self.size += 1

    def extend(self, **rows: np.ndarray | float) -> None:
        """Append len(the first array) rows; scalars are broadcast."""
        n = next(len(v) for v in rows.values() if isinstance(v, np.ndarray))
        self._grow(self.size + n)
        for name, value in rows.items():
            self.data[name][self.size : self.size + n] = value
        self.size += n

    def view(self) -> dict[str, np.ndarray]:
        return {name: column[: self.size] for name, column in self.data.items()}


class Recorder:
    """Collects a run. `record_steps=False` keeps only running totals of the per-step series."""

    def __init__(self, num_gpu_blocks: int, block_size: int, record_steps: bool = True) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.record_steps = record_steps
        self.steps = Columns(STEP_COLUMNS)
        self.requests = Columns(REQUEST_COLUMNS)
        self.itl_s = array("d")  # every inter-token gap, 8 bytes each: C appends, no Python floats kept
        self.num_steps = 0
        self.busy_s = 0.0
        self.block_seconds = 0.0  # integral of blocks used over busy time
        self.slot_seconds = 0.0  # integral of (tokens held / slots allocated) over busy time
        self.peak_blocks = 0
        self.num_preemptions = 0

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
    ) -> None:
        self.num_steps += 1
        self.busy_s += duration_s
        self.block_seconds += kv_blocks_used * duration_s
        if kv_blocks_used:
            self.slot_seconds += tokens_held / (kv_blocks_used * self.block_size) * duration_s
        self.peak_blocks = max(self.peak_blocks, kv_blocks_used)
        self.num_preemptions += num_preemptions
        if self.record_steps:
            self.steps.append(
                replica=replica,
                start_s=start_s,
                duration_s=duration_s,
                num_running=num_running,
                num_waiting=num_waiting,
                num_prefill_tokens=num_prefill_tokens,
                num_decode_requests=num_decode_requests,
                num_sampled=num_sampled,
                sum_context_tokens=sum_context_tokens,
                attention_pairs=attention_pairs,
                kv_blocks_used=kv_blocks_used,
                num_preemptions=num_preemptions,
            )

    def decode_window(
        self,
        *,
        replica: int,
        start_s: np.ndarray,
        duration_s: np.ndarray,
        num_running: int,
        num_waiting_after: int,
        sum_context_tokens: np.ndarray,
        kv_blocks_used: np.ndarray,
        tokens_held: np.ndarray,
    ) -> None:
        """k pure-decode steps at once: every running request decodes one token in each. For a decode
        token the context it attends over is its whole context, so attention pairs = context tokens, and
        the tokens held are the context less shared prefix blocks' repeats. Only the last step can see an arrival (it ends the window), so
        the queue is empty after every step but the last."""
        self.num_steps += len(duration_s)
        self.busy_s += float(duration_s.sum())
        self.block_seconds += float((kv_blocks_used * duration_s).sum())
        self.slot_seconds += float((tokens_held / (kv_blocks_used * self.block_size) * duration_s).sum())
        self.peak_blocks = max(self.peak_blocks, int(kv_blocks_used.max()))
        if self.record_steps:
            num_waiting = np.zeros(len(duration_s), dtype=np.int32)
            num_waiting[-1] = num_waiting_after
            self.steps.extend(
                replica=replica,
                start_s=start_s,
                duration_s=duration_s,
                num_running=num_running,
                num_waiting=num_waiting,
                num_prefill_tokens=0,
                num_decode_requests=num_running,
                num_sampled=num_running,
                sum_context_tokens=sum_context_tokens,
                attention_pairs=sum_context_tokens,
                kv_blocks_used=kv_blocks_used,
                num_preemptions=0,
            )

    def token_gap(self, gap_s: float) -> None:
        self.itl_s.append(gap_s)

    def token_gaps(self, gaps_s: np.ndarray) -> None:
        self.itl_s.frombytes(np.ascontiguousarray(gaps_s, dtype=np.float64).tobytes())

    def itl_ms(self) -> np.ndarray:
        return np.frombuffer(self.itl_s, dtype=np.float64) * 1e3

    def finished(self, request: Request) -> None:
        self.requests.append(
            request_id=request.request_id,
            arrival_s=request.arrival_s,
            first_token_s=request.first_token_s,
            finished_s=request.finished_s,
            prompt_tokens=request.num_prompt_tokens,
            output_tokens=request.num_output_tokens,
            preemptions=request.num_preemptions,
        )


def _stats(name: str, values_ms: np.ndarray) -> dict[str, float]:
    if len(values_ms) == 0:
        return {
            f"mean_{name}_ms": float("nan"),
            f"median_{name}_ms": float("nan"),
            **{f"p{p}_{name}_ms": float("nan") for p in PERCENTILES},
        }
    out = {f"mean_{name}_ms": float(np.mean(values_ms)), f"median_{name}_ms": float(np.median(values_ms))}
    for p, v in zip(PERCENTILES, np.percentile(values_ms, PERCENTILES)):
        out[f"p{p}_{name}_ms"] = float(v)
    return out


def per_request_latencies_ms(requests: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ttft = (requests["first_token_s"] - requests["arrival_s"]) * 1e3
    e2el = (requests["finished_s"] - requests["arrival_s"]) * 1e3
    out_tokens = requests["output_tokens"]
    multi = out_tokens > 1
    tpot = (e2el[multi] - ttft[multi]) / (out_tokens[multi] - 1)
    return {"ttft": ttft, "tpot": tpot, "e2el": e2el, "tpot_mask": multi}


def _percentile(values: np.ndarray, key: str) -> float:
    if len(values) == 0:
        return float("nan")
    if key == "mean":
        return float(np.mean(values))
    return float(np.percentile(values, float(key.removeprefix("p"))))


def slo_report(lat: dict[str, np.ndarray], itl_ms: np.ndarray, slo: SloConfig, duration_s: float) -> dict:
    """Each SLO bound against the measured percentile, and goodput as vLLM's bench defines it: completed
    requests per second whose own TTFT, TPOT and E2E are within every bound set for them."""
    series = {"ttft_ms": lat["ttft"], "tpot_ms": lat["tpot"], "e2el_ms": lat["e2el"], "itl_ms": itl_ms}
    checks = []
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        for key, bound in getattr(slo, metric).items():
            value = _percentile(series[metric], key)
            # No value (e.g. TPOT when every reply is one token): the bound can be neither met nor missed.
            met = None if np.isnan(value) else bool(value <= bound)
            checks.append({"metric": metric, "stat": key, "bound_ms": bound, "value_ms": value, "met": met})
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
    req = rec.requests.view()
    completed = len(req["request_id"])
    duration_s = float(req["finished_s"].max()) if completed else 0.0
    lat = per_request_latencies_ms(req)
    itl_ms = rec.itl_ms()
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
        **_stats("itl", itl_ms),
        **_stats("e2el", lat["e2el"]),
        "num_steps": rec.num_steps,
        "busy_s": rec.busy_s,
        "kv_cache_utilization": {
            "mean": rec.block_seconds / rec.busy_s / rec.num_gpu_blocks if rec.busy_s else 0.0,
            "peak": rec.peak_blocks / rec.num_gpu_blocks,
        },
        # Tokens held / slots in the blocks handed out, time-weighted: what paging saves.
        "kv_slot_utilization": rec.slot_seconds / rec.busy_s if rec.busy_s else 0.0,
        "num_preemptions": rec.num_preemptions,
    }
    slo_result = slo_report(lat, itl_ms, slo, duration_s)
    summary["goodput"] = slo_result["goodput"]
    summary["slo"] = slo_result
    return summary
