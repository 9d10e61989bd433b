"""What a scenario's values may be: the one `RULES` table (one entry per dataclass field that has a range or
a set of values; types come from the type hints), the distributions and arrival processes with what each
needs, and what every check reports a miss with: the file (`Ctx`) and a did-you-mean hint."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from sim.config import (
    DTYPE_BYTES,
    ArrivalConfig,
    Distribution,
    EngineConfig,
    HardwareConfig,
    Scenario,
    SharedPrefixConfig,
    SloConfig,
    TraceConfig,
    WorkloadConfig,
)


class Ctx(NamedTuple):
    file: str  # for messages
    base_dir: Path  # relative paths in the file resolve against it


class Rule(NamedTuple):
    ok: Callable[[Any], bool]
    allowed: str  # completes "file: key = value: ..."
    choices: tuple = ()  # for did-you-mean on enumerations


def one_of(*choices: str) -> Rule:
    return Rule(lambda v: v in choices, "must be one of " + ", ".join(choices), choices)


def at_least(lo: float) -> Rule:
    return Rule(lambda v: v >= lo, f"must be >= {lo}")


def above(lo: float) -> Rule:
    return Rule(lambda v: v > lo, f"must be > {lo}")


DISTS = {  # dist -> the parameters it uses (the others must be left out, so a typo'd choice is caught)
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "normal": ("mean", "std"),
    "lognormal": ("mean", "std"),
    "trace": (),
}
ARRIVAL_UNITS = {"rate": "requests/s", "concurrency": "the number of users"}
DIST_PARAMS = ("value", "low", "high", "mean", "std")
PROCESSES = {  # process -> what it needs (sim/workload.py divides by the rate: there is no "as fast as possible")
    "poisson": ("rate",),
    "gamma": ("rate",),
    "constant": ("rate",),
    "closed": ("concurrency",),
    "trace": (),  # rate optional: rescales the recorded arrivals
}
ARRIVAL_TAKES = {  # process -> every parameter it uses; any other one set is a mistake worth naming
    "poisson": ("rate",),
    "gamma": ("rate", "burstiness"),
    "constant": ("rate",),
    "closed": ("concurrency", "think_time_s"),
    "trace": ("rate",),
}

RULES: dict[tuple[type, str], Rule] = {
    (Scenario, "name"): Rule(lambda v: v.strip() != "", "must not be empty"),
    (Scenario, "dtype"): one_of("bfloat16", "float16", "float32"),
    (Scenario, "calibration"): Rule(lambda v: v.strip() != "", "must be auto or a path to a calibration profile"),
    (HardwareConfig, "tensor_parallel_size"): at_least(1),
    (HardwareConfig, "replicas"): at_least(1),
    (HardwareConfig, "router"): one_of("round_robin", "least_outstanding"),
    (EngineConfig, "scheduler"): one_of("continuous", "static"),
    (EngineConfig, "kv_cache"): one_of("paged", "contiguous"),
    # vLLM's CUDA kernels take 8..128; the simulator and our kernels only need a power of two.
    (EngineConfig, "block_size"): Rule(
        lambda v: v >= 1 and v & (v - 1) == 0, "must be a power of two (vLLM: 8, 16, 32, 64, 128)"
    ),
    (EngineConfig, "gpu_memory_utilization"): Rule(lambda v: 0 < v <= 1, "must be in (0, 1]"),
    (EngineConfig, "max_num_seqs"): at_least(1),
    (EngineConfig, "max_num_batched_tokens"): at_least(1),
    (EngineConfig, "max_model_len"): at_least(1),
    (EngineConfig, "kv_cache_dtype"): one_of("auto", *DTYPE_BYTES),
    (EngineConfig, "num_gpu_blocks_override"): Rule(
        lambda v: v >= 2, "must be >= 2 (block 0 is vLLM's null block, never given to a request)"
    ),
    (WorkloadConfig, "num_requests"): at_least(1),
    (WorkloadConfig, "seed"): at_least(0),
    (WorkloadConfig, "too_long"): one_of("reject", "truncate"),
    (ArrivalConfig, "process"): one_of(*PROCESSES),
    (ArrivalConfig, "rate"): above(0),
    (ArrivalConfig, "burstiness"): above(0),
    (ArrivalConfig, "concurrency"): at_least(1),
    (ArrivalConfig, "think_time_s"): at_least(0),
    (Distribution, "dist"): one_of(*DISTS),
    (Distribution, "value"): at_least(1),
    (Distribution, "low"): at_least(1),
    (Distribution, "high"): at_least(1),
    (Distribution, "mean"): above(0),
    (Distribution, "std"): at_least(0),
    (Distribution, "min"): at_least(1),
    (Distribution, "max"): at_least(1),
    (TraceConfig, "row_order"): one_of("replay", "sample"),
    (SharedPrefixConfig, "tokens"): at_least(1),
    (SharedPrefixConfig, "group_size"): at_least(1),
    **{(SloConfig, f.name): above(0) for f in dataclasses.fields(SloConfig)},  # the bounds, in ms
}


def is_percentile_key(key: Any) -> bool:
    m = re.fullmatch(r"p(\d+(?:\.\d+)?)", key) if isinstance(key, str) else None
    return key == "mean" or (m is not None and 0 < float(m.group(1)) < 100)


SLO_KEYS = "mean or pNN with 0 < NN < 100 (p50, p90, p99, p99.9)"


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    by_lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]}?)" if close else ""
