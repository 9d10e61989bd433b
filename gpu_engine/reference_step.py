"""The machine-speed reference step: one small decode step, timed on a runner to say how fast the machine
runs now (planner calibrate times it around its sweep and around and during every held-out run).
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from gpu_engine.sweep_grid import Shape, build_step
from gpu_engine.sweep_timing import WARMUP_CALLS
from sim.kv_manager import KVCacheManager, cdiv

REFERENCE_REPEATS = 7  # timed calls of the reference step, after WARMUP_CALLS; the median is kept


def reference_shape(max_num_seqs: int, max_model_len: int, block_size: int, max_blocks: int) -> Shape:
    """The machine-speed reference: a decode step of up to 8 requests after 4 blocks of context each, shrunk
    to what the limits and `max_blocks` free KV blocks allow. Timed on the sweep's runner when calibrating
    and on a live run's runner around and during it (`ReferenceProbe`), it says whether the machine ran that
    run as fast as it ran the sweep: a shared machine slows every step when other processes take the CPU."""
    context = max(1, min(4 * block_size, max_model_len - 2))
    batch = max(1, min(8, max_num_seqs, max_blocks // cdiv(context + 1, block_size)))
    return Shape(num_decode=batch, decode_context=context)


class ReferenceProbe:
    """The reference step (`reference_shape`), built once and timed as often as asked on one runner.

    On CPU it runs on a small KV cache of its own, swapped in for the probe, so it can be timed between two
    steps of a live run without touching the run's cache; on CUDA the runner's decode graphs hold the pool's
    addresses, so it uses the runner's pool and must be timed while that is free (before and after a run).
    Its requests' ids lie far above any run's."""

    def __init__(self, runner, shape: Shape, seed: int = 0) -> None:
        from gpu_engine.runner import allocate_kv_caches

        self.runner = runner
        self.own_cache = runner.device.type == "cpu"
        num_blocks = shape.num_blocks(runner.block_size) + 1 if self.own_cache else runner.num_blocks
        if self.own_cache:  # block 0 stays the null block, as in any pool
            self.kv_caches = allocate_kv_caches(runner.spec, num_blocks, runner.block_size, runner.dtype, runner.device)
        kv = KVCacheManager(num_blocks, runner.block_size, enable_caching=False)
        rng, ids = np.random.default_rng(seed), itertools.count(1 << 40)
        self.scheduled = build_step(shape, kv, runner.spec.vocab_size, rng, ids).scheduled

    def time(self, repeats: int = REFERENCE_REPEATS, warmup: int = WARMUP_CALLS) -> float:
        """Median wall seconds of `repeats` calls after `warmup` untimed ones."""
        import torch

        runner = self.runner
        sync = torch.cuda.synchronize if runner.device.type == "cuda" else (lambda: None)
        saved = runner.kv_caches
        if self.own_cache:
            runner.kv_caches = self.kv_caches
        try:
            for _ in range(warmup):
                runner.execute(self.scheduled)
            times = []
            for _ in range(repeats):
                sync()
                t0 = time.perf_counter()
                runner.execute(self.scheduled)
                sync()
                times.append(time.perf_counter() - t0)
        finally:
            runner.kv_caches = saved
        return float(np.median(times))
