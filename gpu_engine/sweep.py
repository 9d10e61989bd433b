"""The step sweep behind `planner calibrate`: a designed grid of step shapes timed on the model runner itself.

Its parts: the grid of step shapes (gpu_engine/sweep_grid.py), their timing on a noisy, shared machine
(gpu_engine/sweep_timing.py) and the machine-speed reference step (gpu_engine/reference_step.py); here,
the timed step on the runner and the rows it gives.

Times are wall-clock, as the live engine's steps.csv counts them (device_s: the runner's execute(), input
preparation to the sampled ids' device sync; host_s: admitting the step's new requests, the scheduler's
schedule() and update() of the same batch, and recording the step), so what is fitted here is what
held-out live runs on the same machine will show.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

import numpy as np

from gpu_engine.sweep_grid import Shape, build_step, design_grid, sweep_order
from gpu_engine.sweep_timing import UNSTABLE_CI, Measured, measure, median_ci
from sim.kv_manager import KVCacheManager
from sim.metrics import STEP_COLUMNS, Recorder
from sim.request import Request, Status
from sim.scheduler import ContinuousScheduler
from sim.scheduler_output import SchedulerOutput

EXTRA_COLUMNS = (
    *("num_tokens", "num_seqs", "host_s", "device_s", "spread_rel", "median_ci_rel", "num_samples", "num_outliers"),
    "stable",
)


def sweep_rows(shapes: Sequence[Shape], steps: Sequence[SchedulerOutput], measured: Sequence[Measured]) -> dict:
    """steps.csv's columns (STEP_COLUMNS) plus EXTRA_COLUMNS and `step_class`, one row per measured shape
    (the first len(measured) shapes): device_s and host_s are their inliers' medians, duration_s their sum
    (as the live engine's steps.csv defines it)."""
    rows: dict[str, list] = {}
    start_s = 0.0
    for shape, out, m in zip(shapes, steps, measured):
        totals = m.totals()
        device_s = float(np.median([d for _, d, _ in m.samples]))
        host_s = float(np.median([h for _, _, h in m.samples]))
        spread = float(np.subtract(*np.percentile(totals, [90, 10]))) / float(np.median(totals))
        row = {
            "start_s": start_s,
            "duration_s": device_s + host_s,
            "num_running": out.num_seqs,
            "num_waiting": 0,
            "num_prefill_tokens": out.num_prefill_tokens,
            "num_decode_requests": out.num_decode_requests,
            "num_sampled": out.num_sampled,
            "sum_context_tokens": out.sum_context_tokens,
            "attention_pairs": out.attention_pairs,
            "kv_blocks_used": sum(len(r.block_ids) for r, _ in out.scheduled),
            "num_preemptions": 0,
            "replica": 0,
            "num_tokens": out.num_tokens,
            "num_seqs": out.num_seqs,
            "host_s": host_s,
            "device_s": device_s,
            "spread_rel": spread,
            "num_samples": len(totals),
            "num_outliers": m.num_outliers,
            "median_ci_rel": median_ci(totals),
            "stable": bool(median_ci(totals) <= UNSTABLE_CI),
            "step_class": shape.step_class,
        }
        start_s += device_s + host_s
        for name, value in row.items():
            rows.setdefault(name, []).append(value)
    dtypes = dict(STEP_COLUMNS) | {"num_tokens": np.int64, "num_seqs": np.int32, "host_s": np.float64}
    dtypes |= {"device_s": np.float64, "spread_rel": np.float64, "num_samples": np.int32, "num_outliers": np.int32}
    dtypes |= {"median_ci_rel": np.float64, "stable": bool, "step_class": object}
    return {name: np.array(rows.get(name, []), dtype=dtype) for name, dtype in dtypes.items()}


def host_step(shape: Shape, engine, vocab_size: int, rng: np.random.Generator, ids) -> Callable[[], float]:
    """A callable that times the scheduler's side of the shape's step, as the live engine's host_s counts
    it: schedule() and update() of a real scheduler holding the shape's requests (decodes running,
    prompt chunks waiting). Requests are rebuilt for each call (outside the timed part): update() advances them."""
    block_size = engine.block_size
    decode_tokens = rng.integers(0, vocab_size, shape.decode_context + 1).tolist()
    prompt_len = shape.cached + shape.chunk + (shape.chunk > 1 and not shape.sampled)
    prompt_tokens = rng.integers(0, vocab_size, prompt_len).tolist()

    def run() -> float:
        kv = KVCacheManager(shape.num_blocks(block_size) + 1, block_size, engine.enable_prefix_caching)
        scheduler = ContinuousScheduler(engine, kv, Recorder(kv.pool.num_blocks, block_size, True))
        for _ in range(shape.num_decode):
            request = Request(next(ids), 0.0, shape.decode_context, 2, prompt_token_ids=decode_tokens[:-1])
            request.output_token_ids, request.num_output_tokens = decode_tokens[-1:], 1
            request.num_computed_tokens = shape.decode_context
            kv.allocate_slots(request, 0)
            request.status = Status.RUNNING
            scheduler.running.append(request)
        # Timed as the live engine's loop counts a step's host side (gpu_engine.engine.run_scenario): admitting
        # the new requests, schedule(), update(), and recording the step.
        t0 = time.perf_counter()
        for _ in range(shape.num_prefill):
            request = Request(next(ids), 0.0, prompt_len, 1, prompt_token_ids=list(prompt_tokens))
            request.num_computed_tokens = shape.cached
            scheduler.add_request(request)
        out = scheduler.schedule()
        blocks_in_use = kv.pool.num_used_blocks
        scheduler.update(out, 0.0, {r.request_id: 0 for r, n in out.scheduled})
        scheduler.record_step(out, 0.0, 0.0, blocks_in_use)
        return time.perf_counter() - t0

    return run


def run_sweep(
    runner,  # gpu_engine.runner.ModelRunner with its KV cache allocated
    engine,  # sim.config.EngineConfig: the limits of the grid and the scheduler whose host time is timed
    max_model_len: int,
    budget_s: float,
    seed: int = 0,
    progress: Callable[[float, float], None] | None = None,
    round_meter: Callable[[], Callable[[], tuple[bool, float | None]]] | None = None,
) -> dict:
    """Sweep the grid on the runner within budget_s; returns the rows (see sweep_rows). `round_meter`: see
    `measure`."""
    import torch

    block_size = runner.block_size
    usable = runner.num_blocks - 1  # block 0 is the null block: the pool never hands it out
    grid = design_grid(engine.max_num_seqs, engine.max_num_batched_tokens, max_model_len, block_size, usable)
    grid = sweep_order(grid, seed)
    rng, ids = np.random.default_rng(seed), itertools.count()
    steps: list[SchedulerOutput] = []
    hosts: list[Callable[[], float]] = []
    vocab_size = runner.spec.vocab_size

    def step(i: int) -> SchedulerOutput:
        while len(steps) <= i:  # built when first needed: shapes the budget drops cost nothing
            shape = grid[len(steps)]
            kv = KVCacheManager(runner.num_blocks, block_size, enable_caching=False)  # one shape at a time
            steps.append(build_step(shape, kv, vocab_size, rng, ids))
            hosts.append(host_step(shape, engine, vocab_size, rng, ids))
        return steps[i]

    sync = torch.cuda.synchronize if runner.device.type == "cuda" else (lambda: None)

    def time_shape(i: int) -> tuple[float, float]:
        scheduled = step(i).scheduled
        sync()
        t0 = time.perf_counter()
        runner.execute(scheduled)  # ends in .tolist() of the sampled ids: waits for the device
        sync()
        device_s = time.perf_counter() - t0
        return device_s, hosts[i]()

    measured = measure(len(grid), time_shape, time.perf_counter, budget_s, progress, round_meter)
    return sweep_rows(grid, steps, measured)
