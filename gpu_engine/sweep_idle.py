"""The first step after the engine waited for work, timed for `planner calibrate` (the cost model's
`idle_wake_s`).

A live engine with nothing to do sleeps until the next request arrives (gpu_engine/engine.py), and the step
that wakes it finds cold what steps back to back keep warm: its code and data in the core's caches, the
core's clock, on a virtual machine the physical core itself. The sweep times its shapes back to back
(gpu_engine/sweep.py); at light load, though, most requests' first step follows an idle spell. So a few of the
grid's shapes, of every class, are timed again after an idle spell and once more a couple of calls later:
the difference is what planner/calibration/wake.py makes the wake term of.

    python -m gpu_engine.sweep_idle [SCENARIO]

prints, for a few shapes of the scenario's model on this machine, a step's time right after its own shape,
after two other shapes (as the sweep's interleaved rounds find it) and after idle spells of 1 to 100 ms.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

import numpy as np

from gpu_engine.sweep_grid import Shape, build_step, design_grid, sweep_order
from sim.kv_manager import KVCacheManager

IDLE_S = 0.05  # the spell before a cold call: light loads' gaps between requests are tens to hundreds of ms
PER_CLASS = 2  # shapes of each class (decode, prefill, mixed) timed after idle
REPEATS = 5  # cold calls per shape
WARM_AFTER = 2  # calls after the cold one before the warm one it is compared with (the second is still warming)


def idle_shapes(grid: Sequence[Shape], per_class: int = PER_CLASS) -> list[Shape]:
    """The first `per_class` shapes of each class in the grid's (seeded, interleaved) order."""
    picked: dict[str, list[Shape]] = {}
    for shape in grid:
        group = picked.setdefault(shape.step_class, [])
        if len(group) < per_class:
            group.append(shape)
    return [shape for group in picked.values() for shape in group]


def wake_samples(
    timers: Sequence[Callable[[], float]],
    idle_s: float = IDLE_S,
    repeats: int = REPEATS,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[np.ndarray, np.ndarray]:
    """(cold, warm) seconds per shape and repeat: `timers[i]()` runs shape i once and returns its seconds;
    cold is its first call after `idle_s` of sleep, with the time the sleep ran past `idle_s` (a live engine sleeps
    until the next arrival, and the request waits for the overshoot too: planner/calibration/wake.py), warm its
    call WARM_AFTER calls later."""
    cold, warm = [], []
    for _ in range(repeats):
        for timer in timers:
            timer()  # warm first: the spell alone is what cools it
            slept_at = time.perf_counter()
            sleep(idle_s)
            overshoot_s = max(time.perf_counter() - slept_at - idle_s, 0.0)
            cold.append(overshoot_s + timer())
            for _ in range(WARM_AFTER - 1):
                timer()
            warm.append(timer())
    return np.array(cold), np.array(warm)


def shape_timer(runner, shape: Shape, seed: int) -> Callable[[], float]:
    """A callable that runs the shape's step on the runner (its own KV blocks) and returns its wall seconds."""
    import torch

    kv = KVCacheManager(runner.num_blocks, runner.block_size, enable_caching=False)
    rng, ids = np.random.default_rng(seed), itertools.count(1 << 41)  # ids far above any run's
    scheduled = build_step(shape, kv, runner.spec.vocab_size, rng, ids).scheduled
    sync = torch.cuda.synchronize if runner.device.type == "cuda" else (lambda: None)

    def run() -> float:
        sync()
        t0 = time.perf_counter()
        runner.execute(scheduled)
        sync()
        return time.perf_counter() - t0

    return run


def time_wake(runner, engine, max_model_len: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """(cold, warm) seconds (wake_samples) of PER_CLASS shapes of each class of the sweep's grid on this runner,
    and how many shapes: about REPEATS x 6 x (IDLE_S + a few steps), two to three seconds on a CPU."""
    usable = runner.num_blocks - 1  # block 0 is the null block
    grid = design_grid(engine.max_num_seqs, engine.max_num_batched_tokens, max_model_len, runner.block_size, usable)
    shapes = idle_shapes(sweep_order(grid, seed))
    return *wake_samples([shape_timer(runner, shape, seed) for shape in shapes]), len(shapes)


def _table(scenario_path: str) -> list[str]:
    import torch

    from gpu_engine.engine import CPU_THREADS
    from gpu_engine.runner import ModelRunner
    from planner.scenario.load import load_scenario

    scenario = load_scenario(scenario_path)
    e = scenario.engine
    torch.set_num_threads(CPU_THREADS)
    runner = ModelRunner(scenario.model, scenario.dtype, torch.device("cpu"), None, e.block_size, seed=0)
    runner.allocate(256)
    grid = sweep_order(design_grid(e.max_num_seqs, e.max_num_batched_tokens, scenario.max_model_len, e.block_size, 255))
    shapes = [Shape(num_decode=1, decode_context=e.block_size), *idle_shapes(grid, 1)]
    others = [shape_timer(runner, shape, 1) for shape in grid[-2:]]
    gaps_ms = (1, 10, 50, 100)
    lines = [
        f"{scenario.model.name} on this machine's CPU ({CPU_THREADS} thread): median ms of 40 calls each (20 cold ones)",
        "| shape | right after its own shape | after two other shapes | "
        + " | ".join(f"after {g} ms idle" for g in gaps_ms)
        + " |",
        "| --- " * (3 + len(gaps_ms)) + "|",
    ]
    for shape in shapes:
        timer = shape_timer(runner, shape, 0)
        own, mixed = [], []
        for _ in range(10):  # alternating, so that a change of the machine's speed hits both columns alike
            timer()
            own += [timer() for _ in range(4)]
            for _ in range(4):
                for other in others:
                    other()
                mixed.append(timer())
        idle = [np.median(wake_samples([timer], g / 1e3, 20)[0]) for g in gaps_ms]
        label = (
            f"{shape.num_decode} decode{'s' * (shape.num_decode > 1)} after {shape.decode_context}"
            if shape.num_decode
            else ""
        )
        if shape.num_prefill:
            label += (" + " if label else "") + f"{shape.num_prefill} x {shape.chunk} prompt tokens"
        cells = [np.median(own), np.median(mixed), *idle]
        lines.append(f"| {label} | " + " | ".join(f"{c * 1e3:.3f}" for c in cells) + " |")
    return lines


if __name__ == "__main__":
    import sys

    print("\n".join(_table(sys.argv[1] if len(sys.argv) > 1 else "scenarios/cpu_tiny.yaml")))
