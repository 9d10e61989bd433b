"""What a scenario's values may be: the one `RULES` table (one entry per dataclass field that has a range or
a set of values; types come from the type hints), the distributions and arrival processes with what each
needs, and what every check reports a miss with: the file (`Ctx`) and a did-you-mean hint."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from sim.config import (
    DTYPE_BYTES,
    POOL_ROLES,
    ArrivalConfig,
    Distribution,
    EngineConfig,
    FleetRouterConfig,
    GpuSpec,
    HardwareConfig,
    KvOffloadConfig,
    KvTransferConfig,
    ModelSpec,
    PoolConfig,
    Scenario,
    SessionsConfig,
    SharedPrefixConfig,
    SloConfig,
    SpeculativeConfig,
    TraceConfig,
    WorkloadConfig,
)
from sim.kv_transfer import LINK_LATENCY_MS
from sim.moe_group import ALL2ALL_BACKENDS


class Ctx(NamedTuple):
    file: str  # for messages
    base_dir: Path  # relative paths in the file resolve against it


class Rule(NamedTuple):
    ok: Callable[[Any], bool]
    allowed: str  # completes "file: key = value: ..."
    choices: tuple = ()  # for did-you-mean on enumerations


def one_of(*choices: str) -> Rule:
    return Rule(lambda v: v in choices, "must be one of " + ", ".join(choices), choices)


def _num(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def in_range(lo: float, hi: float, unit: str = "") -> Rule:
    """lo <= v <= hi; hi is what a real deployment could have (a wider value is a typo or an attack)."""
    return Rule(lambda v: lo <= v <= hi, f"must be in [{_num(lo)}, {_num(hi)}]{unit}")


def above_to(lo: float, hi: float, unit: str = "") -> Rule:
    """lo < v <= hi."""
    return Rule(lambda v: lo < v <= hi, f"must be in ({_num(lo)}, {_num(hi)}]{unit}")


# Upper bounds shared by several keys. Each is beyond any deployment we know of, and small enough that the
# arithmetic on it stays exact and the run's memory bounded.
MAX_RENTAL_USD_PER_HOUR, MAX_PURCHASE_USD = 1e4, 1e8  # a GPU's price: also the sizing file's overrides of it
MAX_TOKENS = 1 << 24  # 16,777,216: a context length (Llama 4 Scout's is 10,485,760)
MAX_NUM_REQUESTS = 10_000_000  # a run's requests; 1,000,000 simulate in < 1 GB (`python -m sim.bench_scale`)
MAX_NUM_GPU_BLOCKS = 1 << 24  # the block pool keeps a few dozen bytes per block
# Runs of --intervals (simulate, size): each is a whole simulation, and from 1,000 the 90% interval's ends (the 5%
# and 95% quantiles) are known to within about a percentile point (a 5% quantile's rank has a binomial std of
# 0.7%); more barely move the figures but take hours of a long scenario. An interval needs at least 2.
MIN_INTERVAL_RUNS, MAX_INTERVAL_RUNS = 2, 1000
MAX_LAYERS = 1024  # a model's decoder layers (the largest published have 126); the catalog checks it first


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

ROUTER_POLICIES = ("round_robin", "least_outstanding", "prefix", "length")
# vLLM's KV connectors for disaggregated serving (vllm/distributed/kv_transfer/kv_connector/v1/).
KV_CONNECTORS = ("NixlConnector", "MooncakeConnector", "LMCacheConnectorV1", "P2pNcclConnector")

RULES: dict[tuple[type, str], Rule] = {
    (Scenario, "name"): Rule(lambda v: v.strip() != "", "must not be empty"),
    (Scenario, "dtype"): one_of("bfloat16", "float16", "float32"),
    (Scenario, "calibration"): Rule(lambda v: v.strip() != "", "must be auto or a path to a calibration profile"),
    (HardwareConfig, "tensor_parallel_size"): in_range(1, 64),
    (HardwareConfig, "replicas"): in_range(1, 1024),
    (HardwareConfig, "router"): one_of("round_robin", "least_outstanding"),
    # data parallel (planner/scenario/data_parallel.py checks how these fit together); vLLM's largest wide-EP
    # deployments run 96-320 ranks
    (HardwareConfig, "data_parallel_size"): in_range(1, 1024),
    (HardwareConfig, "gpus_per_node"): in_range(1, 1024),
    (HardwareConfig, "num_nodes"): in_range(1, 1024),
    (HardwareConfig, "nvlink_domain_gpus"): in_range(1, 1024),  # NVLink Switch systems join up to 576 GPUs
    (HardwareConfig, "internode_gbit_per_s"): in_range(0.1, 1e5, " Gb/s"),
    (EngineConfig, "scheduler"): one_of("continuous", "static"),
    (EngineConfig, "kv_cache"): one_of("paged", "contiguous"),
    # vLLM's CUDA kernels take 8..128 (its CacheConfig up to 256); the simulator and our kernels only need
    # a power of two.
    (EngineConfig, "block_size"): Rule(
        lambda v: 1 <= v <= 256 and v & (v - 1) == 0, "must be a power of two in [1, 256] (vLLM: 8, 16, 32, 64, 128)"
    ),
    (EngineConfig, "gpu_memory_utilization"): above_to(0, 1),
    (EngineConfig, "max_num_seqs"): in_range(1, 65_536),
    (EngineConfig, "max_num_batched_tokens"): in_range(1, MAX_TOKENS),
    (EngineConfig, "max_model_len"): in_range(1, MAX_TOKENS),
    (EngineConfig, "kv_cache_dtype"): one_of("auto", *DTYPE_BYTES),
    (EngineConfig, "num_scheduler_steps"): in_range(1, 1024),
    (EngineConfig, "all2all_backend"): one_of(*ALL2ALL_BACKENDS),
    (EngineConfig, "eplb_num_redundant_experts"): in_range(0, 1 << 16),
    (EngineConfig, "expert_load_balancedness"): above_to(0, 1),
    # a step of one token cannot be split in two micro-batches (vLLM aborts a split that leaves one empty)
    (EngineConfig, "dbo_decode_token_threshold"): in_range(2, MAX_TOKENS, " tokens"),
    (EngineConfig, "dbo_prefill_token_threshold"): in_range(2, MAX_TOKENS, " tokens"),
    (EngineConfig, "num_gpu_blocks_override"): Rule(
        lambda v: 2 <= v <= MAX_NUM_GPU_BLOCKS,
        f"must be in [2, {_num(MAX_NUM_GPU_BLOCKS)}] (block 0 is vLLM's null block, never given to a request)",
    ),
    # engine.speculative (planner/scenario/speculative.py checks what involves the model and the drafter)
    (SpeculativeConfig, "method"): one_of("ngram", "eagle", "eagle3", "mtp", "draft_model"),
    # vLLM serves chains of a few drafts (EAGLE-3 accepts up to 7 in its paper): more than 16 is a typo
    (SpeculativeConfig, "num_speculative_tokens"): in_range(1, 16),
    (SpeculativeConfig, "draft_tensor_parallel_size"): in_range(1, 64),
    (SpeculativeConfig, "prompt_lookup_max"): in_range(1, 1024, " tokens"),
    (SpeculativeConfig, "prompt_lookup_min"): in_range(1, 1024, " tokens"),
    (SpeculativeConfig, "synthetic_acceptance_length"): in_range(1, 17),
    (SpeculativeConfig, "draft_rate"): above_to(0, 1),
    (WorkloadConfig, "num_requests"): in_range(1, MAX_NUM_REQUESTS),
    (WorkloadConfig, "seed"): in_range(0, 2**63 - 1),
    (WorkloadConfig, "too_long"): one_of("reject", "truncate"),
    (ArrivalConfig, "process"): one_of(*PROCESSES),
    # One request a week to a million a second; the gamma shape as vLLM's bench takes it, cut where draws
    # would underflow to 0 (1e-3: every gap but a few is 0, all requests arrive in a burst).
    (ArrivalConfig, "rate"): in_range(1e-6, 1e6, " requests/s"),
    (ArrivalConfig, "burstiness"): in_range(1e-3, 1e3),
    (ArrivalConfig, "concurrency"): in_range(1, 100_000),
    (ArrivalConfig, "think_time_s"): in_range(0, 86_400, " s"),
    (Distribution, "dist"): one_of(*DISTS),
    (Distribution, "value"): in_range(1, MAX_TOKENS, " tokens"),
    (Distribution, "low"): in_range(1, MAX_TOKENS, " tokens"),
    (Distribution, "high"): in_range(1, MAX_TOKENS, " tokens"),
    (Distribution, "mean"): in_range(1, MAX_TOKENS, " tokens"),
    (Distribution, "std"): in_range(0, MAX_TOKENS, " tokens"),
    (Distribution, "min"): in_range(1, MAX_TOKENS, " tokens"),
    (Distribution, "max"): in_range(1, MAX_TOKENS, " tokens"),
    (TraceConfig, "row_order"): one_of("replay", "sample"),
    (TraceConfig, "arrival_unit"): one_of("s", "ms"),
    (SessionsConfig, "rate"): in_range(1e-6, 1e6, " sessions/s"),
    (SessionsConfig, "min_turns"): in_range(1, 10_000, " turns"),
    (SessionsConfig, "max_turns"): in_range(1, 10_000, " turns"),
    (SessionsConfig, "turn_gap_s"): in_range(0, 86_400, " s"),
    (SessionsConfig, "start"): one_of("empty", "steady"),
    # A host tier of a few MiB to 16 TiB per GPU; PCIe 3.0 x4 (4 GB/s) to past PCIe 6.0 x16 (128 GB/s)
    (KvOffloadConfig, "size_gib"): in_range(0.001, 16384, " GiB"),
    (KvOffloadConfig, "host_link_gb_s"): in_range(0.1, 1000, " GB/s"),
    (KvOffloadConfig, "host_memory_gib"): in_range(0.001, 1 << 20, " GiB"),
    # A disk tier of a few MiB to 1 PiB per GPU, read or written at a SATA SSD's 0.1 GB/s to past PCIe 6.0 NVMe
    (KvOffloadConfig, "disk_gib"): in_range(0.001, 1 << 20, " GiB"),
    (KvOffloadConfig, "disk_read_gb_s"): in_range(0.01, 1000, " GB/s"),
    (KvOffloadConfig, "disk_write_gb_s"): in_range(0.01, 1000, " GB/s"),
    (TraceConfig, "block_tokens"): in_range(1, 1 << 20, " tokens"),
    (SharedPrefixConfig, "tokens"): in_range(1, MAX_TOKENS),
    (SharedPrefixConfig, "group_size"): in_range(1, MAX_NUM_REQUESTS),
    **{(SloConfig, f.name): above_to(0, 1e9, " ms") for f in dataclasses.fields(SloConfig)},  # the bounds
    # Inline GPU and model mappings (planner.scenario.special_fields checks them after the catalog has read them).
    (GpuSpec, "memory_bytes"): in_range(1 << 20, 1 << 44, " bytes (1 MiB to 16 TiB)"),
    # The rates a step's time divides by have floors far below any device that serves a model (the catalog's
    # slowest, the 2-core `cpu` entry, is estimated at 0.2 TFLOPS and 10 GB/s; 1 Gb Ethernet between GPUs moves
    # 0.125 GB/s): a rate near 0 (1e-300) is a typo, and would make every step take an infinite time.
    **{
        (GpuSpec, name): in_range(lo, hi, unit)
        for name, lo, hi, unit in (
            ("bf16_tflops", 0.01, 1e5, " TFLOPS"),
            ("fp8_tflops", 0.01, 1e5, " TFLOPS"),
            ("fp4_tflops", 0.01, 1e5, " TFLOPS"),
            ("fp32_tflops", 0.01, 1e5, " TFLOPS"),
            ("memory_bandwidth_gbps", 1, 1e6, " GB/s"),
            ("interconnect_bandwidth_gbps", 0.1, 1e6, " GB/s"),
        )
    },
    (GpuSpec, "gpus_per_node"): in_range(1, 1024),
    (GpuSpec, "nvlink_domain_gpus"): in_range(1, 1024),
    (GpuSpec, "internode_gbit_per_s"): in_range(0.1, 1e5, " Gb/s"),
    **{
        (GpuSpec, name): above_to(0, hi, unit)
        for name, hi, unit in (
            ("tdp_w", 1e5, " W"),
            ("rental_usd_per_hour", MAX_RENTAL_USD_PER_HOUR, " $/h"),
            ("purchase_usd", MAX_PURCHASE_USD, " $"),
        )
    },
    **{
        (ModelSpec, name): in_range(1, hi)
        for name, hi in (
            ("hidden_size", 1 << 17),
            ("intermediate_size", 1 << 20),
            ("num_hidden_layers", MAX_LAYERS),
            ("num_attention_heads", 1024),
            ("num_key_value_heads", 1024),
            ("head_dim", 4096),
            ("vocab_size", 1 << 24),
            ("max_position_embeddings", MAX_TOKENS),
        )
    },
    # Optional parts (0 or None: absent), bounded far above every published model (DeepSeek-V3: 256 experts of
    # width 2,048, a latent of 512; Llama 4: 128 experts): a count of 10^40 experts is a typo, whose "short by
    # 4.2e39 GiB" says nothing useful.
    **{
        (ModelSpec, name): in_range(0, hi)
        for name, hi in (
            ("num_experts", 1 << 16),
            ("num_experts_per_tok", 1 << 16),
            ("moe_intermediate_size", 1 << 20),
            ("shared_expert_intermediate_size", 1 << 20),
            ("q_lora_rank", 1 << 17),
            ("kv_lora_rank", 1 << 17),
            ("qk_rope_head_dim", 4096),
            ("qk_nope_head_dim", 4096),
            ("v_head_dim", 4096),
            ("quant_group_size", 1 << 24),
        )
    },
    (ModelSpec, "sliding_window"): in_range(1, MAX_TOKENS, " tokens"),
    # A fleet (planner/scenario/fleet.py checks how these fit together).
    (PoolConfig, "role"): one_of(*POOL_ROLES),
    (FleetRouterConfig, "policy"): one_of(*ROUTER_POLICIES),
    (FleetRouterConfig, "threshold_tokens"): in_range(1, MAX_TOKENS, " tokens"),
    (KvTransferConfig, "link"): one_of(*LINK_LATENCY_MS),
    # A slow office network (1 Gb/s) to more than NVLink 5's 7,200 Gb/s per GPU.
    (KvTransferConfig, "bandwidth_gbit_per_s"): in_range(0.1, 1e5, " Gb/s"),
    (KvTransferConfig, "latency_ms"): in_range(0, 1e4, " ms"),
    (KvTransferConfig, "connector"): one_of(*KV_CONNECTORS),
}


def is_percentile_key(key: Any) -> bool:
    # [0-9], not \d: \d also takes other scripts' digits (p٩٩), which float() reads but no reader of the file would
    # No leading zero (p00099 read as p99, p05 as p5: one percentile, one spelling)
    m = re.fullmatch(r"p((?:[1-9][0-9]*|0)(?:\.[0-9]+)?)", key) if isinstance(key, str) else None
    return key == "mean" or (m is not None and 0 < float(m.group(1)) < 100)


SLO_KEYS = "mean or pNN with 0 < NN < 100 (p50, p90, p99, p99.9)"


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    import difflib  # late: only a mistake needs it, and every start-up would pay for its import

    by_lower = {str(c).lower(): str(c) for c in choices}
    lower = str(word).lower()
    # A name the word begins (h100: h100-sxm, h100-pcie) before the closest spelling (h200)
    extended = [by_lower[c] for c in by_lower if lower and c.startswith(lower) and c != lower][:3]
    if extended:
        return f" (did you mean {' or '.join(extended)}?)"
    close = difflib.get_close_matches(lower, list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]}?)" if close else ""
