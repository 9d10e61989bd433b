"""The step sweep behind `planner calibrate`: a designed grid of step shapes timed on the model runner itself.

Whole scenarios mix their steps in whatever proportions the load gives; a fit needs every term of the cost
model exercised on its own and together. So the sweep times single steps of chosen shapes:
    decode   B requests decoding one token each after C context tokens     (B x C)
    prefill  S prompt chunks of N tokens after K cached tokens             (N x K, a few S)
    mixed    B decodes plus one prompt chunk in the same step, as chunked prefill schedules them
up to the scenario's max_num_seqs, max_num_batched_tokens and max_model_len. Every shape is built with the
serving model's own Request, KVCacheManager and SchedulerOutput, so the runner gets the block tables and
positions a real step would, and the row carries exactly steps.csv's aggregates (STEP_COLUMNS).

Timing is built for a noisy, shared machine (another process may stall a step by hundreds of ms):
- round 0 warms every shape up (first calls allocate and, on CUDA, compile) and times it once;
- then rounds: each round times every shape once, so a slow spell of the machine hits one round of many
  shapes rather than every repeat of one shape;
- a sample is an outlier when it is far from its shape's median (in median absolute deviations), when
  its whole round ran slow, or (given a round meter) when other processes kept the machine busy during its
  round or the reference step ran slower in it than in the machine's fastest round; outliers are
  re-measured and never enter the median;
- budget left over buys more rounds for the shapes whose median is still uncertain;
- each row keeps the median of its inliers, their spread and the width of the median's 95% confidence
  interval; a row whose median is still uncertain is marked unstable (the fitter leaves it out).
Everything is bounded by `budget_s` on the given clock: fewer rounds, then fewer shapes, never a longer run.
Times are wall-clock, as the live engine's steps.csv counts them (device_s: the runner's execute(), input
preparation to the sampled ids' device sync; host_s: admitting the step's new requests, the scheduler's
schedule() and update() of the same batch, and recording the step), so what is fitted here is what
held-out live runs on the same machine will show.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sim.kv_manager import KVCacheManager, cdiv
from sim.metrics import STEP_COLUMNS, Recorder
from sim.request import Request, Status
from sim.scheduler import ContinuousScheduler, SchedulerOutput

WARMUP_CALLS = 2  # per shape before its first timed call
MIN_ROUNDS, MAX_ROUNDS = 3, 9  # timed samples per shape (round 0 included)
ROUND0_SHARE = 0.4  # of the budget at most, for warm-up and the first timing of each shape
OUTLIER_MADS = 5.0  # |sample - median| beyond this many (normal-scaled) MADs is an outlier ...
OUTLIER_FLOOR = 0.15  # ... and beyond this fraction of the median (timer jitter is a few %)
SLOW_ROUND = 0.2  # a round whose median sample/median ratio is off by more than this ran in a slow spell
MAX_REMEASURE_PASSES = 6  # while the budget lasts: a slow spell of the machine can outlast a few passes
MAX_SAMPLES = 40  # per shape: extra rounds for the uncertain ones while the budget lasts
UNSTABLE_CI = 0.2  # the 95% confidence interval of the median wider than this fraction of it: not fitted
SLOWER_THAN_BEST = 0.10  # a round whose reference step ran this much slower than the fastest round's: re-measured
EXTRA_COLUMNS = (
    *("num_tokens", "num_seqs", "host_s", "device_s", "spread_rel", "median_ci_rel", "num_samples", "num_outliers"),
    "stable",
)


@dataclass(frozen=True)
class Shape:
    """One step: `num_decode` decodes after `decode_context` tokens each, plus `num_prefill` prompt chunks of
    `chunk` tokens after `cached` computed tokens; `sampled`: the chunks end their prompts (logits sampled)."""

    num_decode: int = 0
    decode_context: int = 0
    num_prefill: int = 0
    chunk: int = 0
    cached: int = 0
    sampled: bool = True

    @property
    def step_class(self) -> str:
        if not self.num_prefill:
            return "decode"
        return "prefill" if not self.num_decode else "mixed"

    @property
    def num_tokens(self) -> int:
        return self.num_decode + self.num_prefill * self.chunk

    @property
    def num_seqs(self) -> int:
        return self.num_decode + self.num_prefill

    def num_blocks(self, block_size: int) -> int:
        prefill_len = self.cached + self.chunk + (not self.sampled)
        return self.num_decode * cdiv(self.decode_context + 1, block_size) + self.num_prefill * cdiv(
            prefill_len, block_size
        )


def geometric(low: int, high: int, count: int) -> list[int]:
    """About `count` distinct integers from low to high, evenly spaced in log (both ends included)."""
    if high <= low:
        return [max(low, high)]
    return sorted({round(float(v)) for v in np.geomspace(low, high, count)})


def design_grid(
    max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int, block_size: int, max_blocks: int
) -> list[Shape]:
    """Every shape the limits allow (token budget, rows, model length, and `max_blocks` KV blocks)."""
    budget, max_len = max_num_batched_tokens, max_model_len
    max_batch = min(max_num_seqs, budget)
    contexts = geometric(block_size, max_len - 1, 6)
    shapes = [Shape(num_decode=b, decode_context=c) for b in geometric(1, max_batch, 7) for c in contexts]
    for chunk in geometric(min(block_size, budget), min(budget, max_len), 6):
        for i, cached in enumerate(sorted({0, *geometric(block_size, max_len - chunk - 1, 3)})):
            if cached + chunk < max_len:
                shapes.append(Shape(num_prefill=1, chunk=chunk, cached=cached, sampled=i % 2 == 0))
    for num_prompts in geometric(2, min(max_num_seqs, budget // block_size), 3):
        shapes.append(Shape(num_prefill=num_prompts, chunk=min(budget // num_prompts, max_len)))
    for b in geometric(1, min(max_num_seqs - 1, budget - block_size), 4):
        for c in geometric(block_size, max_len - 1, 3):
            for chunk in sorted({budget - b, max(block_size, (budget - b) // 4)}):
                chunk = min(chunk, max_len - 1)
                shapes.append(Shape(num_decode=b, decode_context=c, num_prefill=1, chunk=chunk, cached=0))
    return [s for s in dict.fromkeys(shapes) if s.num_seqs and s.num_blocks(block_size) <= max_blocks]


def sweep_order(shapes: Sequence[Shape], seed: int = 0) -> list[Shape]:
    """Classes interleaved, each in a seeded random order: any prefix of the list covers the grid evenly,
    so a budget that stops early still fits every term."""
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[Shape]] = {}
    for shape in shapes:
        by_class.setdefault(shape.step_class, []).append(shape)
    queues = [[group[i] for i in rng.permutation(len(group))] for group in by_class.values()]
    return [s for batch in itertools.zip_longest(*queues) for s in batch if s is not None]


def build_step(shape: Shape, kv: KVCacheManager, vocab_size: int, rng: np.random.Generator, ids) -> SchedulerOutput:
    """The shape as the scheduler would have scheduled it: requests with block tables from `kv`."""
    out = SchedulerOutput()
    parts = [(shape.decode_context, 1, 1)] * shape.num_decode
    parts += [(shape.cached, shape.chunk, 0)] * shape.num_prefill
    for computed, num_new, num_output in parts:
        prompt_len = computed + num_new - num_output + (num_new > 1 and not shape.sampled)
        tokens = rng.integers(0, vocab_size, prompt_len + num_output).tolist()
        request = Request(next(ids), 0.0, prompt_len, num_output + 1, prompt_token_ids=tokens[:prompt_len])
        request.output_token_ids = tokens[prompt_len:]
        request.num_output_tokens = num_output
        request.num_computed_tokens = computed
        if not kv.allocate_slots(request, num_new):
            raise ValueError(f"shape {shape} needs more than the {kv.pool.num_blocks} KV blocks allocated")
        out.add(request, num_new)
    return out


@dataclass
class Measured:
    """One shape's samples: kept ones and how many were thrown out as outliers."""

    samples: list[tuple[int, float, float]]  # (round, device_s, host_s)
    num_outliers: int = 0

    def totals(self) -> np.ndarray:
        return np.array([device + host for _, device, host in self.samples])


def _robust(values: np.ndarray) -> tuple[float, float]:
    median = float(np.median(values))
    return median, 1.4826 * float(np.median(np.abs(values - median)))


def _outliers(measured: list[Measured], slow_rounds: set[int]) -> list[list[int]]:
    """Per shape, the indices of its samples that are outliers."""
    out = []
    for m in measured:
        totals = m.totals()
        median, mad = _robust(totals)
        limit = max(OUTLIER_MADS * mad, OUTLIER_FLOOR * median)
        rounds = [r for r, _, _ in m.samples]
        out.append([i for i, (r, s) in enumerate(zip(rounds, totals)) if abs(s - median) > limit or r in slow_rounds])
    return out


def _slow_rounds(measured: list[Measured]) -> set[int]:
    """Rounds where the whole machine ran slow (or fast): their median sample/shape-median ratio is off."""
    ratios: dict[int, list[float]] = {}
    for m in measured:
        totals = m.totals()
        median = float(np.median(totals))
        for (r, _, _), s in zip(m.samples, totals):
            ratios.setdefault(r, []).append(s / median)
    return {r for r, v in ratios.items() if len(v) >= 3 and abs(float(np.median(v)) - 1) > SLOW_ROUND}


def median_ci(values: np.ndarray) -> float:
    """Width of the median's distribution-free 95% confidence interval (order statistics n/2 -+ 0.98 sqrt(n)),
    relative to the median; inf with fewer than MIN_ROUNDS values."""
    n = len(values)
    if n < MIN_ROUNDS:
        return float("inf")
    ordered = np.sort(values)
    low = max(int(np.floor(n / 2 - 0.98 * np.sqrt(n))), 0)
    high = min(int(np.ceil(n / 2 + 0.98 * np.sqrt(n))), n - 1)
    return float(ordered[high] - ordered[low]) / float(np.median(values))


def measure(
    num_shapes: int,
    time_shape: Callable[[int], tuple[float, float]],
    clock: Callable[[], float],
    budget_s: float,
    progress: Callable[[float, float], None] | None = None,
    round_meter: Callable[[], Callable[[], tuple[bool, float | None]]] | None = None,
) -> list[Measured]:
    """Time shapes 0..num_shapes-1 (in that priority) within budget_s; `time_shape(i)` runs shape i once and
    returns its (device_s, host_s) (warm-ups are calls whose result is ignored). Shapes beyond what the budget allows
    for MIN_ROUNDS samples are dropped from the end, so the result may be shorter than num_shapes.

    `round_meter()`, called as a round starts, returns a callable that says at its end (busy, speed_s):
    whether other processes kept the machine busy meanwhile, and the reference step's seconds over the round
    (planner calibrate passes one on CPU). A round that was busy, or whose reference step ran more than
    SLOWER_THAN_BEST slower than in the machine's fastest round, is re-measured like a slow round, whether
    or not its samples look slow: the machine's own speed changes (another virtual machine on the host)
    shift every shape alike, which no per-shape rule sees."""
    start = clock()
    busy_rounds: set[int] = set()
    round_speed_s: dict[int, float] = {}

    def meter_ends(r: int, end: Callable[[], tuple[bool, float | None]] | None) -> None:
        if end is None:
            return
        busy, speed_s = end()
        if busy:
            busy_rounds.add(r)
        if speed_s is not None:
            round_speed_s[r] = speed_s

    def slow_machine_rounds() -> set[int]:
        best = min(round_speed_s.values(), default=None)
        return {r for r, v in round_speed_s.items() if best and v > (1 + SLOWER_THAN_BEST) * best}

    def timed_round(r: int, shapes: Sequence[int], repeats: Sequence[int] | None = None) -> None:
        end = round_meter() if round_meter is not None else None
        for i, n in zip(shapes, repeats or [1] * len(shapes)):
            measured[i].samples += [(r, *time_shape(i)) for _ in range(n)]
        meter_ends(r, end)

    def elapsed() -> float:
        done = clock() - start
        if progress is not None:
            progress(min(done, budget_s), budget_s)
        return done

    measured: list[Measured] = []
    end = round_meter() if round_meter is not None else None
    for i in range(num_shapes):  # round 0: warm up, time once
        if measured and elapsed() > ROUND0_SHARE * budget_s:
            break
        for _ in range(WARMUP_CALLS):
            time_shape(i)
        measured.append(Measured([(0, *time_shape(i))]))
    meter_ends(0, end)
    estimate = [float(m.totals()[0]) for m in measured]
    remaining = budget_s - elapsed()
    # Keep 20% of what is left for re-measuring; drop shapes until MIN_ROUNDS samples each fit.
    while len(measured) > 1 and (MIN_ROUNDS - 1) * sum(estimate) > 0.8 * remaining:
        measured.pop()
        estimate.pop()
    num_rounds = int(np.clip(0.8 * remaining // max(sum(estimate), 1e-9) + 1, MIN_ROUNDS, MAX_ROUNDS))
    for r in range(1, num_rounds):
        if elapsed() > budget_s:
            break
        timed_round(r, range(len(measured)))

    next_round = num_rounds
    while elapsed() < 0.8 * budget_s:  # more samples where the median is still uncertain
        uncertain = [i for i, m in enumerate(measured) if median_ci(m.totals()) > UNSTABLE_CI]
        uncertain = [i for i in uncertain if len(measured[i].samples) < MAX_SAMPLES]
        if not uncertain:
            break
        timed_round(next_round, uncertain)
        next_round += 1
    for _ in range(MAX_REMEASURE_PASSES):
        flagged = _outliers(measured, _slow_rounds(measured) | busy_rounds | slow_machine_rounds())
        if not any(flagged) or elapsed() > budget_s:
            break
        for m, bad in zip(measured, flagged):
            if bad:
                m.samples = [s for j, s in enumerate(m.samples) if j not in bad]
                m.num_outliers += len(bad)
        redo = [(i, len(bad)) for i, bad in enumerate(flagged) if bad]
        timed_round(next_round, [i for i, _ in redo], [n for _, n in redo])
        next_round += 1
    for m, bad in zip(measured, _outliers(measured, set())):  # what re-measuring could not replace
        if bad and len(bad) < len(m.samples):
            m.samples = [s for j, s in enumerate(m.samples) if j not in bad]
            m.num_outliers += len(bad)
    return measured


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


def blocks_for_grid(
    max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int, block_size: int, limit: int
) -> int:
    """KV blocks the sweep needs: enough for its largest shape plus the null block (block 0, never handed
    out), at most `limit` (what the device holds)."""
    grid = design_grid(max_num_seqs, max_num_batched_tokens, max_model_len, block_size, limit - 1)
    return max(s.num_blocks(block_size) for s in grid) + 1
