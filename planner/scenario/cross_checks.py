"""The scenario rules that involve more than one field: vLLM's rules for tensor parallel, max_model_len and
the token budget; what each distribution and arrival process needs; the trace columns they read."""

from __future__ import annotations

import csv
import dataclasses
import typing
from collections.abc import Callable
from typing import Any

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.data_parallel import check_data_parallel
from planner.scenario.kv_reuse import check_kv_offload, check_sessions
from planner.scenario.rules import ARRIVAL_TAKES, ARRIVAL_UNITS, DIST_PARAMS, DISTS, PROCESSES, Ctx, did_you_mean
from planner.scenario.speculative import check_speculative
from sim.config import Distribution, GpuSpec, Scenario, WorkloadConfig
from sim.defaults import resolve_batch_limits
from sim.memory_fit import tensor_parallel_sizes


def _where_to_give(gpu: GpuSpec) -> str:
    """Where a GPU figure the scenario needs goes: a catalog GPU without it (the cpu entry) is not mended in a
    mapping the user never wrote (the GPU itself says which: a sizing candidate is not the file's GPU)."""
    from planner import catalog  # late: the catalog reads its YAML on use

    if gpu.name in catalog.gpu_names() and not catalog.differs_from_catalog(gpu):
        return f"the catalog's {gpu.name} has none: give hardware.gpu as a mapping of its fields with it"
    return f"give it in the inline gpu mapping ({gpu.name})"


def check_relations(s: Scenario, raw: dict, ctx: Ctx, key_named: Callable[[str], str] = str) -> Scenario:
    """`key_named`: the key a message names for a key of `s` (a fleet's pool: `hardware.x` is
    fleet.pools.NAME.hardware.x)."""

    def fail(key_path: str, value: Any, allowed: str) -> typing.NoReturn:
        raise ScenarioError(ctx.file, key_named(key_path), value, allowed)

    m, hw, eng, wl = s.model, s.hardware, s.engine, s.workload

    # Tensor parallel, as vLLM's QKVParallelLinear: query heads are split evenly; KV heads are split when
    # there are at least tp of them, else each is replicated on tp/num_kv_heads GPUs.
    tp = hw.tensor_parallel_size
    if tp not in tensor_parallel_sizes(m.num_attention_heads, m.num_key_value_heads, limit=tp):
        valid = ", ".join(map(str, tensor_parallel_sizes(m.num_attention_heads, m.num_key_value_heads, limit=64)))
        fail(
            "hardware.tensor_parallel_size", tp,
            f"must divide the model's num_attention_heads ({m.num_attention_heads}) and divide its"
            f" num_key_value_heads ({m.num_key_value_heads}) or be a multiple of them (KV heads are then"
            f" replicated), as vLLM requires; valid sizes for {m.name}: {valid}",
        )  # fmt: skip

    in_mapping = _where_to_give(hw.gpu)
    if tp > 1 and hw.gpu.interconnect_bandwidth_gbps is None:  # the cost model prices the all-reduces by it
        fail(
            "hardware.gpu.interconnect_bandwidth_gbps", NO_VALUE,
            f"missing; tensor_parallel_size {tp} needs the GPU's link bandwidth (GB/s per GPU, one direction:"
            f" NVLink 450 on an H100, PCIe Gen4 x16 32); {in_mapping}",
        )  # fmt: skip

    if s.dtype == "float32" and hw.gpu.fp32_tflops is None:  # the cost model prices float32 matmuls by it
        fail(
            "hardware.gpu.fp32_tflops", NO_VALUE,
            "missing; dtype float32 needs the GPU's FP32 peak without tensor cores (TFLOPS: 67 on an H100, 19.5 on"
            f" an A100), where float32 matmuls run by default (no TF32); {in_mapping}, or use bfloat16",
        )  # fmt: skip

    # Expert parallel: vLLM accepts the flag for any model and ignores it where it means nothing (a dense model,
    # or one GPU: `FusedMoEParallelConfig.make` sets use_ep only for tp x dp > 1); asked for there, it would be
    # silently dropped, so it is refused.
    if hw.expert_parallel and not m.num_moe_layers:  # no experts, or every layer dense (mlp_only_layers)
        fail(
            "hardware.expert_parallel", True,
            f"is only for mixture-of-experts models; {m.name} is dense (no layer has experts to place); allowed: false",
        )  # fmt: skip
    if hw.expert_parallel and hw.num_gpus == 1:
        fail(
            "hardware.expert_parallel", True,
            "needs hardware.tensor_parallel_size or data_parallel_size > 1 (the experts are placed whole across the"
            " ranks; on one GPU there is nothing to split); allowed: false on one GPU",
        )  # fmt: skip
    s = check_data_parallel(s, raw, fail)

    # max_model_len: the model's limit by default; above it is an error, as in vLLM.
    limit = m.max_position_embeddings
    max_len = eng.max_model_len or limit
    if max_len > limit:
        fail("engine.max_model_len", max_len, f"must be <= the model's max_position_embeddings ({limit})")
    # Unset token budget and max_num_seqs: what `vllm serve` picks on this GPU (sim/defaults.py).
    given = raw.get("engine") or {}
    budget, seqs = resolve_batch_limits(
        hw.gpu, tp, max_len, eng.enable_chunked_prefill,
        eng.max_num_batched_tokens if "max_num_batched_tokens" in given else None,
        eng.max_num_seqs if "max_num_seqs" in given else None,
    )  # fmt: skip
    if not eng.enable_chunked_prefill and budget < max_len:
        fail(
            "engine.max_num_batched_tokens", budget,
            f"is smaller than max_model_len ({max_len}) with enable_chunked_prefill false, so longer prompts could "
            "never be scheduled; raise max_num_batched_tokens, lower max_model_len or enable chunked prefill",
        )  # fmt: skip
    if budget < seqs:  # vLLM's SchedulerConfig raises this too
        fail("engine.max_num_batched_tokens", budget, f"must be >= max_num_seqs ({seqs})")
    if eng.num_scheduler_steps > 1 and (eng.async_scheduling or eng.scheduler != "continuous"):
        fail(
            "engine.num_scheduler_steps", eng.num_scheduler_steps,
            "above 1 is vLLM V0's multi-step scheduling (0.6-0.7), which ran its host work in series with the GPU's"
            " and batched continuously: set engine.async_scheduling false (and scheduler continuous), or keep 1",
        )  # fmt: skip
    if eng.num_scheduler_steps > 1 and eng.speculative is not None:  # vLLM V0 refused the pair too (EngineArgs)
        fail(
            "engine.num_scheduler_steps", eng.num_scheduler_steps,
            "above 1 (multi-step scheduling) cannot run with engine.speculative; keep 1 or remove engine.speculative",
        )  # fmt: skip
    eng = dataclasses.replace(eng, max_model_len=max_len, max_num_batched_tokens=budget, max_num_seqs=seqs)

    # What each distribution and arrival process needs.
    dists: dict[str, Distribution] = {
        f"workload.{name}": getattr(wl, name) for name in ("prompt_tokens", "output_tokens")
    }
    if wl.sessions is not None:
        dists["workload.sessions.message_tokens"] = wl.sessions.message_tokens
    for where, d in dists.items():
        for p in DIST_PARAMS:
            given = getattr(d, p) is not None
            if p in DISTS[d.dist] and not given:
                fail(f"{where}.{p}", NO_VALUE, f"missing; dist {d.dist} needs {', '.join(DISTS[d.dist])}")
            if p not in DISTS[d.dist] and given:
                uses = ", ".join(DISTS[d.dist]) or "no parameters (lengths come from workload.trace)"
                fail(f"{where}.{p}", getattr(d, p), f"not used by dist {d.dist}, which takes {uses}")
        if d.dist == "uniform" and d.low > d.high:
            fail(f"{where}.low", d.low, f"must be <= high ({d.high})")
        if d.max is not None and d.min > d.max:
            fail(f"{where}.min", d.min, f"must be <= max ({d.max})")
        # Lengths are clipped to [min, max]: a length that always lands outside would be changed, every time
        # and without a word (a random draw outside is clipped as documented).
        bounds = f"[min {d.min}, max {d.max}]" if d.max is not None else f"[min {d.min}, no max]"
        if d.dist == "fixed" and (d.value < d.min or (d.max is not None and d.value > d.max)):
            fail(f"{where}.value", d.value, f"must be within {bounds}, which clip every length")
        if d.dist == "uniform" and (d.high < d.min or (d.max is not None and d.low > d.max)):
            fail(f"{where}.low", d.low, f"with high {d.high}: the range must overlap {bounds}, which clip every length")
        if d.dist == "trace" and wl.trace is None:
            fail(f"{where}.dist", d.dist, "needs workload.trace (path and columns of a CSV trace)")
    a = wl.arrival
    raw_arrival = ((raw.get("workload") or {}).get("arrival")) or {}
    if wl.sessions is not None:
        check_sessions(wl, raw, ctx)
        raw_arrival = {}
    for p in raw_arrival:
        if p != "process" and p not in ARRIVAL_TAKES[a.process]:
            fail(
                f"workload.arrival.{p}", raw_arrival[p],
                f"not used by process {a.process}, which takes {', '.join(ARRIVAL_TAKES[a.process])}",
            )  # fmt: skip
    for p in PROCESSES[a.process] if wl.sessions is None else ():
        if getattr(a, p) is None:
            fail(f"workload.arrival.{p}", NO_VALUE, f"missing; process {a.process} needs {p} ({ARRIVAL_UNITS[p]})")
    if a.process == "trace" and wl.trace is None:
        fail("workload.arrival.process", a.process, "needs workload.trace (path and columns of a CSV trace)")
    if a.process == "trace" and wl.trace.arrival_column is None:
        fail("workload.trace.arrival_column", None, "process trace needs the column of arrival times")
    if wl.trace is not None:
        _check_trace_columns(wl, ctx)
    s = dataclasses.replace(s, engine=eng)
    check_speculative(s, ctx)  # engine.speculative against the model, the drafter and the engine
    check_kv_offload(s, ctx)  # engine.kv_offload against what it does not combine with, and the host memory
    return s


def _check_trace_columns(wl: WorkloadConfig, ctx: Ctx) -> None:
    """The columns the workload will read exist in the CSV's header (cheap, and a typo is likely)."""
    t = wl.trace
    used = {
        "prompt_column": wl.prompt_tokens.dist == "trace",
        "output_column": wl.output_tokens.dist == "trace",
        "arrival_column": wl.arrival.process == "trace",
    }
    if not any(used.values()):
        raise ScenarioError(
            ctx.file, "workload.trace", NO_VALUE,
            "is set but unused: set prompt_tokens.dist, output_tokens.dist and/or arrival.process to trace",
        )  # fmt: skip
    if t.block_ids_column is not None:
        _check_block_ids(wl, ctx)
    if not t.path.lower().endswith(".csv"):
        return  # another format: the workload reader checks it
    try:
        with open(t.path, newline="", encoding="utf-8-sig") as f:  # a byte-order mark is no part of a name
            header = [name.strip() for name in next(csv.reader(f), [])]  # as sim/trace_file.py reads it
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ScenarioError(ctx.file, "workload.trace.path", t.path, f"cannot read its header: {e}") from None
    if not header:
        raise ScenarioError(ctx.file, "workload.trace.path", t.path, "is empty: a CSV trace needs a header line")
    for key, is_used in used.items():
        column = getattr(t, key)
        if is_used and column not in header:
            hint = did_you_mean(column, header)
            raise ScenarioError(
                ctx.file,
                f"workload.trace.{key}",
                column,
                f"no such column in {t.path}{hint}; columns: {', '.join(header)}",
            )


def _check_block_ids(wl: WorkloadConfig, ctx: Ctx) -> None:
    """A trace's prompt block ids name the prompts the trace's own lengths give, once each, in no other prefix."""
    t, where = wl.trace, "workload.trace.block_ids_column"
    if t.path.lower().endswith(".csv"):
        raise ScenarioError(
            ctx.file, where, t.block_ids_column, "needs a JSON Lines trace (.jsonl): a CSV holds no lists"
        )
    if wl.prompt_tokens.dist != "trace":
        raise ScenarioError(
            ctx.file, "workload.prompt_tokens.dist", wl.prompt_tokens.dist,
            "must be trace with workload.trace.block_ids_column: the block ids name the trace's own prompts",
        )  # fmt: skip
    if wl.shared_prefix is not None:
        raise ScenarioError(
            ctx.file, "workload.shared_prefix", NO_VALUE,
            "cannot be combined with workload.trace.block_ids_column: the trace's block ids say what is shared",
        )  # fmt: skip
    if t.row_order != "replay":
        raise ScenarioError(
            ctx.file, "workload.trace.row_order", t.row_order,
            "must be replay with workload.trace.block_ids_column: sampled rows would send one prompt several times",
        )  # fmt: skip
