"""Reading a `vllm bench serve --save-result --save-detailed` JSON: its per-request lists, checked, as arrays.

A request's E2E is its TTFT plus the sum of its gaps (`itls`), as vLLM's own tools compute it (serve.py's
timeline plot); its TPOT is that sum over output_lens - 1, bench serve's definition. A request with an error
(vLLM lists failed ones with an empty reply) is left out and counted. Arrival times are `start_times` (when
each request was sent; vLLM writes them since 2025), shifted to start at 0; an older file has none, and then
the workload is rebuilt from `request_rate`, `burstiness` and `max_concurrency` (planner.calibration.vllm_replay).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.errors import PlannerError, read_text_file
from planner.vllm_files.names import BENCH_DETAILED_KEYS, BENCH_SUMMARY_KEYS

MAX_BENCH_BYTES = 1 << 30  # a detailed file of 100,000 requests x 1,000 tokens is ~1 GB


@dataclass(frozen=True)
class BenchRun:
    """One bench-serve result: its successful requests in sending order."""

    path: Path
    model_id: str | None
    backend: str | None
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    start_s: np.ndarray | None  # shifted to start at 0; None: the file has no start_times
    request_rate: float  # requests/s (inf: all at once)
    burstiness: float
    max_concurrency: int | None
    num_failed: int
    vllm_version: str | None = None  # when the run recorded it (--metadata vllm_version=...)

    def __len__(self) -> int:
        return len(self.ttft_s)

    @property
    def tpot_s(self) -> np.ndarray:
        """Per request with at least two tokens (bench serve's TPOT); the others are left out."""
        multi = self.output_tokens > 1
        return (self.e2e_s[multi] - self.ttft_s[multi]) / (self.output_tokens[multi] - 1)

    @property
    def span_s(self) -> float:
        """From the first request sent to the last reply's end."""
        start = self.start_s if self.start_s is not None else np.zeros(len(self))
        return float((start + self.e2e_s).max()) if len(self) else 0.0


def _fail(path: Path, field: str, value, allowed: str) -> PlannerError:
    shown = json.dumps(value)[:40] if not isinstance(value, str | type(None)) else repr(value)
    return PlannerError(f"{path}: {field} = {shown}: {allowed}")


def _numbers(path: Path, data: dict, key: str, count: int, integer: bool) -> np.ndarray:
    values = data[key]
    if not isinstance(values, list) or len(values) != count:
        size = len(values) if isinstance(values, list) else type(values).__name__
        raise PlannerError(f"{path}: {key}: {size} entries, but input_lens has {count}: the file is cut or edited")
    for i, v in enumerate(values):
        ok = not isinstance(v, bool) and isinstance(v, int if integer else int | float)
        if not ok or not math.isfinite(v) or v < 0:
            kind = "a whole number of tokens >= 0" if integer else "a finite number of seconds >= 0"
            raise _fail(path, f"{key}[{i}]", v, f"must be {kind}")
    return np.asarray(values, dtype=np.int64 if integer else np.float64)


def _gap_sums(path: Path, itls, count: int) -> np.ndarray:
    if not isinstance(itls, list) or len(itls) != count:
        raise PlannerError(f"{path}: itls: not a list of {count} lists (one per request, as input_lens)")
    sums = np.empty(count)
    for i, gaps in enumerate(itls):
        if not isinstance(gaps, list):
            raise _fail(path, f"itls[{i}]", gaps, "must be a list of gaps in seconds")
        for j, g in enumerate(gaps):
            if isinstance(g, bool) or not isinstance(g, int | float) or not math.isfinite(g) or g < 0:
                raise _fail(path, f"itls[{i}][{j}]", g, "must be a finite number of seconds >= 0")
        sums[i] = math.fsum(gaps)
    return sums


def _rate(path: Path, data: dict) -> float:
    rate = data.get("request_rate", "inf")
    if rate == "inf":
        return math.inf
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
        raise _fail(path, "request_rate", rate, 'must be a number of requests/s > 0 or "inf"')
    return float(rate)


def read_bench(path: Path) -> BenchRun:
    """A bench-serve result file, checked; a PlannerError naming the file and the field otherwise."""
    text = read_text_file(path, "vllm bench serve result (JSON)", MAX_BENCH_BYTES)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        cut = " (the file ends early: cut off?)" if e.pos >= len(text.rstrip()) else ""
        raise PlannerError(f"{path}: line {e.lineno}, column {e.colno}: not JSON ({e.msg}){cut}") from None
    except (ValueError, RecursionError) as e:
        raise PlannerError(f"{path}: not a vllm bench serve result ({e})") from None
    if not isinstance(data, dict) or any(key not in data for key in BENCH_SUMMARY_KEYS):
        missing = [k for k in BENCH_SUMMARY_KEYS if not isinstance(data, dict) or k not in data]
        raise PlannerError(
            f"{path}: {missing[0]}: missing; not a vllm bench serve result (a JSON from another tool?): it has"
            f" none of {', '.join(missing)}"
        )
    absent = [k for k in BENCH_DETAILED_KEYS if k not in data]
    if absent:
        raise PlannerError(
            f"{path}: {absent[0]}: missing; the per-request lists ({', '.join(BENCH_DETAILED_KEYS)}) are written by"
            " vllm bench serve --save-result --save-detailed only"
        )
    if not isinstance(data["input_lens"], list):
        raise _fail(path, "input_lens", data["input_lens"], "must be a list of prompt lengths")
    count = len(data["input_lens"])
    prompt = _numbers(path, data, "input_lens", count, integer=True)
    output = _numbers(path, data, "output_lens", count, integer=True)
    ttft = _numbers(path, data, "ttfts", count, integer=False)
    gaps = _gap_sums(path, data["itls"], count)
    start = _numbers(path, data, "start_times", count, integer=False) if "start_times" in data else None
    errors = data.get("errors") or [""] * count
    if not isinstance(errors, list) or len(errors) != count:
        raise PlannerError(f"{path}: errors: not a list of {count} entries (one per request, as input_lens)")
    ok = np.array([not e for e in errors], dtype=bool) & (output > 0)
    completed = data["completed"]
    if isinstance(completed, bool) or not isinstance(completed, int) or completed != int(ok.sum()):
        raise _fail(path, "completed", completed, f"the lists hold {int(ok.sum())} successful requests: cut or edited")
    if not ok.any():
        raise PlannerError(f"{path}: completed = 0: no successful request to fit")
    order = np.argsort(start[ok], kind="stable") if start is not None else np.arange(int(ok.sum()))
    start_s = None if start is None else (start[ok] - start[ok].min())[order]
    concurrency = data.get("max_concurrency")
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise _fail(path, "max_concurrency", concurrency, "must be a whole number >= 1 or null")
    burstiness = data.get("burstiness", 1.0)
    if isinstance(burstiness, bool) or not isinstance(burstiness, int | float) or not burstiness > 0:
        raise _fail(path, "burstiness", burstiness, "must be a number > 0")
    return BenchRun(
        path=path,
        model_id=data.get("model_id") if isinstance(data.get("model_id"), str) else None,
        backend=data.get("backend") if isinstance(data.get("backend"), str) else None,
        prompt_tokens=prompt[ok][order],
        output_tokens=output[ok][order],
        ttft_s=ttft[ok][order],
        e2e_s=(ttft + gaps)[ok][order],
        start_s=start_s,
        request_rate=_rate(path, data),
        burstiness=float(burstiness),
        max_concurrency=concurrency,
        num_failed=int((~ok).sum()),
        vllm_version=next((str(data[k]) for k in ("vllm_version", "version") if isinstance(data.get(k), str)), None),
    )
