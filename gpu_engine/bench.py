"""Live engine benchmark: `python -m gpu_engine.bench` (issue 4, section 7).

On a CUDA device, with a random-initialised real-size model (llama-3.1-8b by default, bf16), three figures:
1. decode: one request's decode step (a few hundred tokens of context) against the weights-read floor,
   the bytes of weights a step must stream / the device's measured copy bandwidth. Target: <= 1.15x
   (issue 15). Beside it the host time per decode step: the runner's CPU time before it waits for the
   sampled ids (ModelRunner.last_host_s; under CUDA graphs, packing the batch, the copies and the replay).
2. throughput: output tokens/s of the engine (sim's continuous scheduler driving the runner) against
   transformers' `generate` with static batches of the same seeded requests, all arriving at t=0.
   Target: >= 3x. A static batch runs until its longest reply, but only each request's own output counts.
3. memory: what the engine's start-up profiling measures (weights, activation peak, KV pool, blocks)
   beside the memory model's prediction for the same scenario on the catalog GPU of this device.

`--device cpu --tiny` runs the same three sections with catalog `tiny-llama` in float32 and small workloads,
so that the script stays tested on machines without a GPU; its timings say nothing about a GPU, so the
targets are shown there without a verdict.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import gpu_engine.attention
from gpu_engine.engine import EngineError, drain, warm_up
from gpu_engine.model import Transformer
from gpu_engine.profiling import profile_num_blocks
from gpu_engine.runner import ModelRunner
from gpu_engine.static_baseline import hf_config, static_run
from planner.calibration.device_gpu import catalog_gpu_of_device
from planner.scenario.load import validate_mapping
from planner_kernels.bench import copy_bandwidth_gbs
from sim.config import Scenario
from sim.kv_manager import cdiv
from sim.memory import memory_breakdown
from sim.metrics import Recorder
from sim.request import Request
from sim.scheduler import build_scheduler
from sim.workload import Workload, generate_workload, make_request

DECODE_TARGET_RATIO = 1.15  # decode step time / weights-read floor, at most (issue 15)
THROUGHPUT_TARGET_RATIO = 3.0  # engine / static output tokens per second, at least (issue 15)
MIB = 1 << 20
# Rows of the memory table: key shared by profile_num_blocks' dict and MemoryBreakdown -> label.
MEMORY_ROWS = {
    "total_bytes": "total",
    "usable_bytes": "usable (x util)",
    "weights_bytes": "weights",
    "activation_bytes": "activation peak",
    "non_torch_bytes": "non-torch",
    "kv_cache_bytes": "KV pool",
    "num_gpu_blocks": "num_gpu_blocks",
}


@dataclass(frozen=True)
class BenchSize:
    """How big each section is: a real model on a GPU, or a tiny one on a CPU within a test's time."""

    model: str
    dtype: str
    num_requests: int
    prompt_tokens: tuple[int, int]  # uniform, inclusive
    output_tokens: tuple[int, int]  # uniform, inclusive
    decode_context_tokens: int
    decode_warmup_steps: int
    decode_timed_steps: int
    static_batch_size: int  # transformers' batch
    engine: dict  # scenario engine settings over vLLM's defaults


FULL = BenchSize("llama-3.1-8b", "bfloat16", 128, (64, 512), (16, 512), 300, 10, 50, 32, {})
# A smaller token budget and batch: profiling on CPU runs the reference attention one sequence at a time.
TINY = BenchSize(
    "tiny-llama", "float32", 16, (8, 64), (4, 32), 64, 3, 10, 4, {"max_num_batched_tokens": 256, "max_num_seqs": 16}
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gpu_engine.bench", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", help=f"catalog model (default {FULL.model}; {TINY.model} with --tiny)")
    p.add_argument("--tiny", action="store_true", help=f"{TINY.model} in {TINY.dtype}, small workloads (CPU mode)")
    p.add_argument("--num-requests", type=int, help="requests of the throughput section")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    return p.parse_args(argv)


# --- the scenario: the same one the memory model predicts and the engine runs -----------------------------


def this_gpu(device: torch.device) -> str | dict:
    """The scenario's hardware.gpu: a catalog key, or an inline GPU of the device's own memory size."""
    if device.type == "cpu":
        return "cpu"
    name, total_bytes = torch.cuda.get_device_name(device), torch.cuda.mem_get_info(device)[1]
    # Only memory_bytes reaches the memory model; the rates are placeholders (fp32_tflops: a float32 scenario
    # needs one).
    return catalog_gpu_of_device(name, total_bytes) or {
        "name": name,
        "memory_bytes": total_bytes,
        "bf16_tflops": 1.0,
        "fp32_tflops": 1.0,
        "memory_bandwidth_gbps": 1.0,
    }


def bench_scenario(size: BenchSize, model: str, gpu: str | dict, num_requests: int) -> Scenario:
    """A closed loop with every request in flight: all arrive at t=0."""
    return validate_mapping({
        "name": f"bench-{model}",
        "model": model,
        "dtype": size.dtype,
        "hardware": {"gpu": gpu},
        # max_model_len: no request is rejected as too long
        "engine": {"max_model_len": size.prompt_tokens[1] + size.output_tokens[1], **size.engine},
        "workload": {
            "num_requests": num_requests,
            "seed": 0,
            "arrival": {"process": "closed", "concurrency": num_requests},
            "prompt_tokens": {"dist": "uniform", "low": size.prompt_tokens[0], "high": size.prompt_tokens[1]},
            "output_tokens": {"dist": "uniform", "low": size.output_tokens[0], "high": size.output_tokens[1]},
        },
    }, "<gpu_engine.bench>", Path.cwd())  # fmt: skip


# --- timing -----------------------------------------------------------------------------------------------


def weights_read_bytes(model: Transformer) -> int:
    """Parameter bytes one decode step streams: all of them but an untied embedding table, of which the
    step only gathers one row per token (a tied one is read whole as the LM head)."""
    total = sum(p.nbytes for p in model.parameters())
    return total if model.lm_head is None else total - model.embed_tokens.weight.nbytes


class HostTimed:
    """The runner, keeping each step's host time (ModelRunner.last_host_s)."""

    def __init__(self, runner: ModelRunner):
        self.runner, self.host_s = runner, []

    def execute(self, scheduled) -> dict[int, int]:
        out = self.runner.execute(scheduled)
        self.host_s.append(self.runner.last_host_s)
        return out


def decode_step_s(scenario: Scenario, runner: ModelRunner, num_blocks: int, size: BenchSize) -> tuple[float, float]:
    """Medians of one request's decode steps after the warm-up ones: (wall time, host time). The runner's
    sampled-id `.tolist()` waits for the device, so each recorded step ends when the GPU is done."""
    context = size.decode_context_tokens
    num_output = 1 + size.decode_warmup_steps + size.decode_timed_steps  # the prefill step samples the first
    recorder = Recorder(num_blocks, scenario.engine.block_size)
    scheduler = build_scheduler(scenario, num_blocks, recorder)
    scheduler.add_request(Request(0, 0.0, context, num_output, prompt_token_ids=[0] * context))
    timed = HostTimed(runner)
    drain(scheduler, timed, time.perf_counter)
    steps = recorder.steps.view()
    decode = steps["num_prefill_tokens"] == 0
    decode_s, host_s = steps["duration_s"][decode], np.array(timed.host_s)[decode]
    return float(np.median(decode_s[size.decode_warmup_steps :])), float(np.median(host_s[size.decode_warmup_steps :]))


def engine_run(scenario: Scenario, runner: ModelRunner, num_blocks: int, workload: Workload) -> dict:
    """Every request of the workload at t=0 through sim's scheduler and the runner, on the wall clock."""
    recorder = Recorder(num_blocks, scenario.engine.block_size, record_steps=False)
    scheduler = build_scheduler(scenario, num_blocks, recorder)
    for index in range(len(workload)):
        scheduler.add_request(make_request(workload, index, 0.0, with_token_ids=True))
    start = time.perf_counter()
    drain(scheduler, runner, lambda: time.perf_counter() - start)
    elapsed_s = time.perf_counter() - start
    return {
        "elapsed_s": elapsed_s,
        "output_tokens_per_s": int(workload.output_tokens.sum()) / elapsed_s,
        "num_steps": recorder.num_steps,
        "num_preemptions": recorder.num_preemptions,
    }


def pool_blocks(scenario: Scenario, workload: Workload, measured_blocks: int) -> int:
    """The profiled pool, capped at what every request needs at once: a larger pool changes no step, and
    zeroing ~100 GB of cache would only cost start-up time."""
    block_size = scenario.engine.block_size
    needed = sum(cdiv(int(p + o), block_size) for p, o in zip(workload.prompt_tokens, workload.output_tokens))
    longest = cdiv(int(max(workload.prompt_tokens + workload.output_tokens)), block_size)
    if measured_blocks < longest:
        raise EngineError(
            f"the profiled KV pool holds {measured_blocks} blocks, less than the longest request"
            f" ({longest} blocks of {block_size})"
        )
    return min(measured_blocks, needed)


def engine_sections(scenario: Scenario, device: torch.device, workload: Workload, size: BenchSize) -> dict:
    """Profile, then time decode and the throughput workload; the runner is freed on return."""
    e = scenario.engine
    runner = ModelRunner(scenario.model, scenario.dtype, device, None, e.block_size, seed=scenario.workload.seed)
    total_bytes = None if device.type == "cuda" else scenario.hardware.gpu.memory_bytes  # CPU: the catalog's
    measured = profile_num_blocks(
        runner, e.max_num_batched_tokens, e.max_num_seqs, e.gpu_memory_utilization, total_bytes
    )
    num_blocks = pool_blocks(scenario, workload, measured["num_gpu_blocks"])
    runner.allocate(num_blocks)
    warm_up(scenario, runner, workload, num_blocks)
    step_s, host_s = decode_step_s(scenario, runner, num_blocks, size)
    return {
        "memory_measured": measured,
        "pool_blocks_allocated": num_blocks,
        "weights_read_bytes": weights_read_bytes(runner.model),
        "decode_step_s": step_s,
        "decode_host_s": host_s,
        "cuda_graphs": runner.decode_graphs is not None and bool(runner.decode_graphs.graphs),
        "throughput": engine_run(scenario, runner, num_blocks, workload),
    }


# --- figures and report ---------------------------------------------------------------------------------


def verdict(ok: bool, device: torch.device) -> str:
    if device.type != "cuda":
        return "n/a (CPU timings say nothing about a GPU)"
    return "PASS" if ok else "MISS"


def decode_figures(engine: dict, copy_gbs: float, size: BenchSize, device: torch.device) -> dict:
    floor_s = engine["weights_read_bytes"] / (copy_gbs * 1e9)
    ratio = engine["decode_step_s"] / floor_s
    return {
        "context_tokens": size.decode_context_tokens,
        "timed_steps": size.decode_timed_steps,
        "step_ms": engine["decode_step_s"] * 1e3,
        "host_ms": engine["decode_host_s"] * 1e3,
        "cuda_graphs": engine["cuda_graphs"],
        "weights_read_bytes": engine["weights_read_bytes"],
        "copy_bandwidth_gbs": copy_gbs,
        "copy_bandwidth_device": device.type,
        "floor_ms": floor_s * 1e3,
        "ratio": ratio,
        "target_max_ratio": DECODE_TARGET_RATIO,
        "verdict": verdict(ratio <= DECODE_TARGET_RATIO, device),
    }


def throughput_figures(
    scenario: Scenario, engine: dict, static: dict, workload: Workload, device: torch.device
) -> dict:
    ratio = engine["throughput"]["output_tokens_per_s"] / static["output_tokens_per_s"]
    e = scenario.engine
    settings = {"max_num_seqs": e.max_num_seqs, "max_num_batched_tokens": e.max_num_batched_tokens}
    return {
        "num_requests": len(workload),
        "output_tokens": int(workload.output_tokens.sum()),
        "engine": engine["throughput"] | settings,
        "static": static,
        "ratio": ratio,
        "target_min_ratio": THROUGHPUT_TARGET_RATIO,
        "verdict": verdict(ratio >= THROUGHPUT_TARGET_RATIO, device),
    }


def memory_figures(scenario: Scenario, engine: dict) -> dict:
    predicted = memory_breakdown(scenario).to_dict()
    return {
        "gpu": scenario.hardware.gpu.name,
        "measured": {k: engine["memory_measured"][k] for k in MEMORY_ROWS},
        "predicted": {k: predicted[k] for k in MEMORY_ROWS},
        "pool_blocks_allocated": engine["pool_blocks_allocated"],
    }


def memory_cell(key: str, value: int) -> str:
    return f"{value:>14,}" if key == "num_gpu_blocks" else f"{value / MIB:>14,.1f}"


def print_report(figures: dict) -> None:
    d, t, m = figures["decode"], figures["throughput"], figures["memory"]
    print(f"device: {figures['device_name']}; model {figures['model']} ({figures['dtype']}, random weights)")
    print(f"\n1. decode, batch 1, {d['context_tokens']} tokens of context, median of {d['timed_steps']} steps")
    print(f"   copy bandwidth ({d['copy_bandwidth_device']})  {d['copy_bandwidth_gbs']:10.1f} GB/s")
    print(f"   weights read per step     {d['weights_read_bytes'] / MIB:10.1f} MiB")
    print(f"   floor (weights / copy bw) {d['floor_ms']:10.3f} ms")
    print(f"   decode step               {d['step_ms']:10.3f} ms")
    graphs = "CUDA graph replay" if d["cuda_graphs"] else "eager"
    print(f"   host time per step        {d['host_ms']:10.3f} ms   ({graphs})")
    print(f"   ratio                     {d['ratio']:10.2f} x   target <= {d['target_max_ratio']}: {d['verdict']}")
    e, s = t["engine"], t["static"]
    print(f"\n2. throughput, {t['num_requests']} requests at t=0, {t['output_tokens']} output tokens")
    print(
        f"   engine (continuous, max_num_seqs {e['max_num_seqs']})  {e['output_tokens_per_s']:10.1f} tok/s"
        f"  ({e['elapsed_s']:.2f} s, {e['num_steps']} steps, {e['num_preemptions']} preemptions)"
    )
    print(
        f"   transformers generate (static, batch {s['batch_size']})  {s['output_tokens_per_s']:10.1f} tok/s"
        f"  ({s['elapsed_s']:.2f} s)"
    )
    print(f"   ratio  {t['ratio']:.2f} x   target >= {t['target_min_ratio']}: {t['verdict']}")
    print(f"\n3. memory: engine profiling vs memory model on catalog GPU {m['gpu']!r}")
    print(f"   {'MiB, except blocks':<22}{'measured':>14}{'predicted':>14}{'diff':>9}")
    for key, label in MEMORY_ROWS.items():
        measured, predicted = m["measured"][key], m["predicted"][key]
        diff = f"{(predicted - measured) / measured:+9.1%}" if measured else f"{'-':>9}"
        print(f"   {label:<22}{memory_cell(key, measured)}{memory_cell(key, predicted)}{diff}")
    print(f"   (the runs above used {m['pool_blocks_allocated']} blocks: the pool capped at what the workload needs)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise EngineError("--device cuda: no CUDA device is visible to torch (use --device cpu --tiny)")
    if args.device == "cuda" and gpu_engine.attention._triton_ops("cuda") is None:
        raise EngineError("--device cuda: triton does not import, so the engine would time its torch fallback")
    device = torch.device(args.device)
    size = TINY if args.tiny else FULL
    model = args.model or size.model
    scenario = bench_scenario(size, model, this_gpu(device), args.num_requests or size.num_requests)
    workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
    config = hf_config(scenario.model)
    copy_gbs = copy_bandwidth_gbs(str(device))  # before the model is built: its 2 GiB of buffers are freed by then
    engine = engine_sections(scenario, device, workload, size)
    if device.type == "cuda":
        torch.cuda.empty_cache()  # hand the engine's memory to transformers
    static = static_run(config, scenario.dtype, device, workload, min(size.static_batch_size, len(workload)))
    figures = {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "model": model,
        "dtype": size.dtype,
        "decode": decode_figures(engine, copy_gbs, size, device),
        "throughput": throughput_figures(scenario, engine, static, workload, device),
        "memory": memory_figures(scenario, engine),
    }
    print_report(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except EngineError as err:  # a message, not a traceback, for a wrong flag or a model that cannot run
        raise SystemExit(f"error: {err}") from None
