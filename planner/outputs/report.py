"""Terminal text: the memory report, a run's summary table and the side-by-side comparison."""

from __future__ import annotations

import math

from planner.errors import one_line
from planner.outputs.speculative import spec_decode_lines
from sim.memory import GIB, MemoryBreakdown
from sim.metrics import LATENCY_KEYS
from sim.prefix_stats import prefix_cache_lines

LATENCIES = tuple(zip(LATENCY_KEYS, ("TTFT", "TPOT", "ITL", "E2E latency")))


def _gib(n: float) -> str:
    """Bytes in the largest binary unit that keeps the figure >= 1 (tiny CPU models are a few MiB)."""
    for unit, size in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def memory_lines(
    mem: MemoryBreakdown, tensor_parallel_size: int, request_tokens: float, request_tokens_said: str = ""
) -> list[str]:
    """The breakdown; request_tokens: the KV a running request of the workload holds, in tokens (0: the workload
    keeps no request), request_tokens_said: what that is (e.g. "at the workload's mean of 135 tokens")."""
    tp = f" (per GPU, tensor parallel {tensor_parallel_size})" if tensor_parallel_size > 1 else " (per GPU)"
    return [
        f"Memory{tp}",
        f"  total memory (driver)        {_gib(mem.total_bytes)}",
        f"  usable (x utilisation)       {_gib(mem.usable_bytes)}",
        f"  weights                      {_gib(mem.weights_bytes)}  ({mem.weights_bytes / 1e9:,.2f} GB)",
        *(  # speculative decoding's drafter, loaded beside the model (its KV in every block: KV per token)
            [
                f"  drafter weights              {_gib(mem.draft_weights_bytes)}  (its layers' KV: {mem.draft_kv_bytes_per_token:,} B per token)"
            ]
            if mem.draft_weights_bytes
            else []
        ),
        (
            f"  activation peak              {_gib(mem.activation_bytes)}"
            f"  (MLP {_gib(mem.activation_mlp_bytes)} + sampler {_gib(mem.activation_sampler_bytes)})"
        ),
        f"  non-torch                    {_gib(mem.non_torch_bytes)}",
        f"  CUDA graphs (vLLM estimate)  {_gib(mem.cuda_graph_bytes) if mem.cuda_graph_bytes else '0 (none captured: enforce_eager, or the host as device)'}",
        _pool_line(mem),
        (
            f"  KV per token                 {mem.kv_bytes_per_token:,} B   block ({mem.block_size} tokens) "
            f"{mem.block_bytes:,} B"
        ),
        f"  num_gpu_blocks               {mem.num_gpu_blocks:,}  (one is vLLM's null block)",
        f"  max KV tokens                {mem.max_kv_tokens:,}",
        (
            f"  requests at once             {mem.requests_that_fit(request_tokens):,.1f} {request_tokens_said};"
            f" {mem.max_concurrency_at_max_len:,.2f} at max_model_len"
            if request_tokens > 0
            else f"  requests at once             {mem.max_concurrency_at_max_len:,.2f} at max_model_len (the"
            " workload keeps no request)"
        ),
        f"GPU KV cache size: {mem.max_kv_tokens:,} tokens",
        f"Maximum concurrency for {mem.max_model_len:,} tokens per request: {mem.max_concurrency_at_max_len:.2f}x",
    ]


def _pool_line(mem: MemoryBreakdown) -> str:
    """The KV cache pool: what is left for it, or the blocks engine.num_gpu_blocks_override sets (the only way
    the pool differs from what is left by a block or more)."""
    pool = mem.num_gpu_blocks * mem.block_bytes
    if abs(pool - max(mem.kv_cache_bytes, 0)) >= mem.block_bytes:
        left = _gib(mem.kv_cache_bytes) if mem.kv_cache_bytes >= 0 else "none"
        return f"  KV cache pool                {_gib(pool)}  (engine.num_gpu_blocks_override; {left} left for it)"
    if mem.kv_cache_bytes < 0:
        return f"  KV cache pool                none: short by {_gib(-mem.kv_cache_bytes)}"
    return f"  KV cache pool                {_gib(mem.kv_cache_bytes)}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def summary_lines(s: dict) -> list[str]:
    lines = [
        f"{s['scenario_name']} ({s['mode']}): {s['completed']:,} requests in {s['duration_s']:,.1f} s"
        + (f", {s['num_rejected']:,} rejected as too long" if s.get("num_rejected") else "")
        + (f", {s['num_truncated']:,} truncated" if s.get("num_truncated") else ""),
        "",
        "Throughput",
        f"  requests/s                   {s['request_throughput']:,.2f}",
        f"  output tokens/s              {s['output_throughput']:,.1f}",
        f"  total tokens/s               {s['total_token_throughput']:,.1f}",
        f"  goodput (req/s within SLOs)  {'-' if s['goodput'] is None else format(s['goodput'], ',.2f')}",
        "",
    ]
    cells = {key: [_ms(s[f"{stat}_{key}_ms"]) for stat in ("mean", "median", "p90", "p99")] for key, _ in LATENCIES}
    width = max(10, 2 + max(len(cell) for row in cells.values() for cell in row))  # 1,074,149.2 ms: 11 wide
    lines.append(f"  {'latency (ms)':<14}" + "".join(f"{head:>{width}}" for head in ("mean", "p50", "p90", "p99")))
    for key, label in LATENCIES:
        lines.append(f"  {label:<14}" + "".join(f"{cell:>{width}}" for cell in cells[key]))
    mem = s["memory"]
    lines += ["", *(_fleet_lines(s) if "fleet" in s else _memory_lines(s))]  # a fleet's memory: each pool's
    if "data_parallel" in s:
        from planner.outputs.data_parallel_summary import data_parallel_lines

        lines += data_parallel_lines(s)
    if "memory_predicted" in s:
        predicted = s["memory_predicted"]
        lines.append(
            f"Memory, measured vs the memory model's prediction (peak allocated {_gib(s['peak_memory_bytes'])}):"
        )
        for key, label in (
            ("weights_bytes", "weights"),
            ("activation_bytes", "activation peak"),
            ("kv_cache_bytes", "memory for KV"),
            ("num_gpu_blocks", "num_gpu_blocks"),
        ):
            fmt = (lambda v: f"{v:,}") if key == "num_gpu_blocks" else _gib
            lines.append(f"  {label:<17}{fmt(mem[key]):>14}{fmt(predicted[key]):>14}")
    if "floors" in s:
        f = s["floors"]
        scenario = s.get("scenario") or {}
        cached = (scenario.get("workload") or {}).get("shared_prefix") and (scenario.get("engine") or {}).get(
            "enable_prefix_caching"
        )
        cached = cached or (s.get("prefix_cache") or {}).get("hit_tokens")  # a trace's or sessions' repeats
        lines.append(
            f"Physical floors on this GPU: TPOT >= {f['tpot_floor_ms']:.1f} ms (read every weight once"
            + (
                " per step, which speculative decoding shares among its accepted tokens),"
                if "spec_decode" in s
                else "),"
            )
            + f" TTFT >= {f['ttft_floor_ms']:.1f} ms at the mean prompt of {f['prompt_tokens']:,.0f} tokens"
            + (" computed whole (a prefix-cache hit skips its shared prefix)" if cached else "")
        )
    if "cost_model_provenance" in s:
        lines.append(f"Cost model: {s['cost_model_provenance']['label']}{_uncertainty(s)}")
    for check in s["slo"]["checks"]:
        verdict = {True: "met", False: "MISSED", None: "n/a (no value)"}[check["met"]]
        if check.get("within_histogram_error"):
            verdict += " (within the ITL histogram's 0.1% of the bound: the exact percentile may fall either side)"
        lines.append(
            f"SLO {check['metric']} {check['stat']} <= {check['bound_ms']:g}: {_ms(check['value_ms'])} ms, {verdict}"
        )
    if s["slo"]["checks"] and s.get("num_rejected"):
        # A verdict over the served requests alone reads as the deployment's while most may have been turned away.
        sent = s["completed"] + s["num_rejected"]
        lines.append(
            f"  (over the {s['completed']:,} requests served: the {s['num_rejected']:,} rejected as too long,"
            f" {s['num_rejected'] / sent:.1%} of {sent:,}, are in no SLO)"
        )
    return lines


def _memory_lines(s: dict) -> list[str]:
    mem, kv = s["memory"], s["kv_cache_utilization"]
    return [
        (
            f"Memory per GPU: weights {_gib(mem['weights_bytes'])}"
            + (f" + drafter {_gib(mem['draft_weights_bytes'])}" if mem.get("draft_weights_bytes") else "")
            + f", KV pool {_gib(mem['num_gpu_blocks'] * mem['block_bytes'])}"
            f" = {mem['num_gpu_blocks']:,} blocks of {mem['block_size']} tokens"
        ),
        (
            f"KV cache: {kv['mean'] * 100:.1f}% of blocks in use on average while busy (peak {kv['peak'] * 100:.1f}%),"
            f" {s['kv_slot_utilization'] * 100:.1f}% of allocated slots hold tokens; {s['num_preemptions']:,} preemptions"
        ),
        *(spec_decode_lines(s) if "spec_decode" in s else []),
        *(prefix_cache_lines(s["prefix_cache"], s.get("kv_offload")) if "prefix_cache" in s else []),
    ]


def _fleet_lines(s: dict) -> list[str]:
    from planner.outputs.fleet_summary import fleet_lines

    return fleet_lines(s)


COMPARE_ROWS = [
    ("completed", "requests completed"),
    ("request_throughput", "requests/s"),
    ("output_throughput", "output tokens/s"),
    ("total_token_throughput", "total tokens/s"),
    *[
        (f"{stat}_{key}_ms", f"{label} {stat} (ms)")
        for key, label in LATENCIES
        for stat in ("mean", "median", "p90", "p99")
    ],
    ("memory.weights_bytes", "weights (bytes)"),
    ("memory.activation_bytes", "activation peak (bytes)"),
    ("memory.kv_cache_bytes", "memory left for KV (bytes)"),
    ("memory.num_gpu_blocks", "num_gpu_blocks"),
    ("peak_memory_bytes", "peak memory (bytes)"),
    ("num_preemptions", "preemptions"),
]
MAX_DIFFERENCES_SAID = 8


def scenario_differences(a: dict, b: dict) -> list[dict]:
    """The scenario settings two summaries were run with that differ ({key, a, b}): a comparison of two
    deployments on purpose, or of a simulation and a run that were not of the same scenario. A model or GPU
    that differs is said by its name, not field by field."""
    flat_a, flat_b = _flatten(a.get("scenario") or {}), _flatten(b.get("scenario") or {})
    out = []
    for key in sorted(set(flat_a) | set(flat_b)):
        va, vb = flat_a.get(key), flat_b.get(key)
        whole = next((p for p in ("model.", "hardware.gpu.") if key.startswith(p)), None)
        if whole and flat_a.get(whole + "name") != flat_b.get(whole + "name") and key != whole + "name":
            continue
        if va != vb:
            out.append({"key": key, "a": va, "b": vb})
    return out


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _get(summary: dict, dotted: str):
    value = summary
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def compare_rows(a: dict, b: dict) -> list[dict]:
    rows = []
    for key, label in COMPARE_ROWS:
        va, vb = _get(a, key), _get(b, key)
        if va is None and vb is None:
            continue
        diff = None if va in (None, 0) or vb is None else (vb - va) / abs(va) * 100
        if diff is not None and not math.isfinite(diff):
            # a baseline too small to divide by (subnormal) or a ratio beyond a float (1e308 against 1) has no
            # percentage, as a zero baseline has none (and JSON has no Infinity)
            diff = None
        rows.append({"metric": key, "label": label, "a": va, "b": vb, "diff_percent": diff})
    return rows


def compare_lines(a: dict, b: dict, name_a: str, name_b: str) -> list[str]:
    def fmt(v):
        return "-" if v is None else (f"{v:,}" if isinstance(v, int) else f"{v:,.2f}")

    # the mode comes from the file and the names from the command line: neither may break the table's lines
    head_a = one_line(f"{name_a} ({a.get('mode', '?')})")
    head_b = one_line(f"{name_b} ({b.get('mode', '?')})")
    lines = [f"{'':<26}{head_a:>24}{head_b:>24}{'diff':>12}"]
    for row in compare_rows(a, b):
        diff = "-" if row["diff_percent"] is None else f"{row['diff_percent']:+.1f}%"
        lines.append(f"{row['label']:<26}{fmt(row['a']):>24}{fmt(row['b']):>24}{diff:>12}")
    differences = scenario_differences(a, b)
    if differences:
        said = [one_line(f"{d['key']} {d['a']!r} vs {d['b']!r}") for d in differences[:MAX_DIFFERENCES_SAID]]
        more = len(differences) - len(said)
        lines.append("")
        lines.append("The two scenarios differ: " + "; ".join(said) + (f"; and {more} more" if more > 0 else ""))
    return lines


def _uncertainty(s: dict) -> str:
    """The fit's (or the transfer's measured) one-std spread of the efficiencies, in % of their values, and
    the step time's spread that the fit's residuals leave."""
    std, values = s["cost_model_provenance"].get("uncertainty") or {}, s.get("cost_model") or {}
    spread = []
    for name in ("flops_efficiency", "bandwidth_efficiency", "interconnect_efficiency"):
        if name in std and values.get(name):
            ratio = std[name] / values[name]
            # A spread of 10x its value or more is a term the fit could not pin (a CPU's flops): drawn across its
            # whole range by --intervals, so said, not left out as it was.
            shown = f"±{ratio:.0%}" if ratio < 10 else f"not pinned by the fit (std {ratio:,.0f}x its value)"
            spread.append(f"{name.removesuffix('_efficiency')} {shown}")
    out = f"; efficiencies {', '.join(spread)} (1 std)" if spread else ""
    residual = std.get("step_time_rel")  # planner.calibration.provenance.STEP_TIME_SPREAD (not imported here)
    return out + (f"; step time ±{residual:.0%} unexplained by the fit (1 std)" if residual else "")
