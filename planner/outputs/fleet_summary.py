"""A fleet run's summary (summary.json's `fleet` section: each pool, the KV pulls, the bottleneck) and its lines.

The top of a fleet's summary is a one-pool summary's, over the requests as the client sees them (behind the
router, or the disaggregated proxy: TTFT from the client's send to the decode replica's first token). Each pool
then says what it did from its own side: a prefill pool's TTFT is its queue plus the prefill (the token the proxy
drops), a decode pool's TPOT is the fleet's. The bottleneck is the pool whose replicas were busy the largest share
of the run; what limited it is read from its busy share and its KV cache use. A data-parallel pool (its replicas
whole groups, sim/fleet_dp.py) also gives each group's requests per rank and what set its lockstep steps, as a
one-pool data-parallel summary does; its busy share is its ranks'.
"""

from __future__ import annotations

from planner.outputs.data_parallel_summary import group_lines
from sim.fleet import FleetResult
from sim.metrics import summarize

# A pool busy this share of the run or more is saturated: its queue, not its speed, sets the latency.
SATURATED_BUSY_SHARE = 0.9
# KV cache blocks in use at the peak at or above this share: the pool ran out of KV room (it preempts).
KV_FULL_SHARE = 0.95
POOL_STATS = (
    "completed",
    "request_throughput",
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "num_steps",
    "busy_s",
    "kv_cache_utilization",
    "kv_slot_utilization",
    "num_preemptions",
)


def fleet_section(result: FleetResult, provenance: dict[str, dict], duration_s: float) -> dict:
    """summary.json's `fleet`: the topology, every pool's figures, the KV pulls and the bottleneck pool."""
    fleet = result.scenario.fleet
    pools = {}
    for pool in result.pools:
        c = pool.config
        stats = summarize(pool.recorder, result.scenario.slo)
        num_engines = c.hardware.replicas * c.hardware.data_parallel_size  # a data-parallel group's ranks each step
        busy_share = stats["busy_s"] / (num_engines * duration_s) if duration_s > 0 else 0.0
        pools[c.name] = {
            "role": c.role,
            "gpu": c.hardware.gpu.name,
            "tensor_parallel_size": c.hardware.tensor_parallel_size,
            "replicas": c.hardware.replicas,
            "num_gpus": c.hardware.replicas * c.hardware.num_gpus,
            **_data_parallel(pool),
            **{key: stats[key] for key in POOL_STATS},
            "busy_share": busy_share,
            "limited_by": _limited_by(busy_share, stats, "ranks" if c.hardware.data_parallel_size > 1 else "replicas"),
            "memory": pool.memory.to_dict(),
            "cost_model_provenance": provenance.get(c.name),
        }
    bottleneck = max(pools, key=lambda name: pools[name]["busy_share"])
    section = {
        "topology": fleet.describe(),
        "num_gpus": fleet.num_gpus,
        "router": fleet.router.policy,
        "pools": pools,
        "bottleneck_pool": bottleneck,
    }
    if result.transfers is not None:
        section["kv_transfer"] = result.transfers.summary(fleet.kv_transfer, result.transfer_latency_ms)
    return section


def _data_parallel(pool) -> dict:
    """A data-parallel pool's groups: each one's requests per rank and lockstep figures (sim/fleet_dp.py)."""
    hw = pool.config.hardware
    if hw.data_parallel_size == 1:
        return {}
    return {
        "data_parallel_size": hw.data_parallel_size,
        "expert_parallel": hw.expert_parallel,
        "all2all_backend": pool.config.engine.all2all_backend,
        "groups": [group.stats() for group in pool.replicas],
    }


def _limited_by(busy_share: float, stats: dict, engines: str) -> str:
    kv_peak = stats["kv_cache_utilization"]["peak"]
    if kv_peak >= KV_FULL_SHARE:
        return f"KV cache: {kv_peak:.0%} of its blocks in use at the peak, {stats['num_preemptions']:,} preemptions"
    if busy_share >= SATURATED_BUSY_SHARE:
        return f"compute: its {engines} busy {busy_share:.0%} of the run"
    return f"nothing: its {engines} busy {busy_share:.0%} of the run, KV peak {kv_peak:.0%}"


def fleet_lines(s: dict) -> list[str]:
    """The terminal's lines for a fleet: a line per pool (what it did, what limited it), the KV pulls."""
    f = s["fleet"]
    lines = [f"Fleet: {f['topology']} = {f['num_gpus']:,} devices, router {f['router']}"]
    for name, p in f["pools"].items():
        kv = p["kv_cache_utilization"]
        ttft = "" if p["role"] == "decode" else f", TTFT p99 {_ms(p['p99_ttft_ms'])} ms"
        tpot = "" if p["role"] == "prefill" else f", TPOT p99 {_ms(p['p99_tpot_ms'])} ms"
        lines.append(
            f"  {name} ({p['role']}, {p['replicas']}x {_engine(p)}):"
            f" {p['completed']:,} requests{ttft}{tpot}, KV mean {kv['mean']:.1%} peak {kv['peak']:.1%};"
            f" limited by {p['limited_by']}"
        )
        for index, group in enumerate(p.get("groups", ())):
            lines += _group_lines(index, group, p["all2all_backend"])
    t = f.get("kv_transfer")
    if t is not None:
        lines.append(
            f"KV transfer ({t['connector']} over {t['link']}, {t['bandwidth_gbit_per_s']:g} Gb/s per GPU):"
            f" {t['num_transfers']:,} pulls, {_bytes(t['bytes_moved'])}, p50 {_ms(t['median_transfer_ms'])} ms,"
            f" p99 {_ms(t['p99_transfer_ms'])} ms"
        )
    lines.append(f"Bottleneck: pool {f['bottleneck_pool']}")
    if "serve" in f:
        lines += ["Serve it with:", *(f"  {line}" for line in f["serve"])]
    return lines


def _engine(p: dict) -> str:
    """'4x h100-sxm', or a data-parallel group's 'DP16 x 1x h200 (EP)'."""
    engine = f"{p['tensor_parallel_size']}x {p['gpu']}"
    if "data_parallel_size" in p:
        engine = f"DP{p['data_parallel_size']} x {engine}" + (" (EP)" if p["expert_parallel"] else "")
    return engine


def _group_lines(index: int, dp: dict, backend: str) -> list[str]:
    per_rank = dp["requests_per_rank"]
    head = f"    group {index}: requests per rank {min(per_rank):,} to {max(per_rank):,} (vLLM's DP balancer)"
    return [head, *(f"    {line}" for line in group_lines(dp, backend))]


def _bytes(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
