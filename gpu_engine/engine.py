"""The live engine's wall-clock loop: the scenario's requests, sim/'s scheduler, a real forward per step.

Requests arrive at the workload's arrival times on the wall clock (the same scenario + seed gives the same
requests as `planner simulate`, with random token ids of the requested lengths) and their output lengths
are forced. Each step: schedule, run one forward (the runner's `.tolist()` of the sampled ids waits for the
device, so the clock is read after the GPU finished), update. A request that arrives during a step joins
at the next schedule, exactly as in the simulator.
"""

from __future__ import annotations

import dataclasses
import heapq
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gpu_engine import speculative
from gpu_engine.cuda_graphs import capture_sizes
from gpu_engine.host_copies import HostCopies
from gpu_engine.host_load import OtherCpuMeter
from gpu_engine.profiling import profile_num_blocks
from gpu_engine.reference_step import ReferenceProbe
from gpu_engine.runner import ModelRunner, SamplingParams
from gpu_engine.step_execute import execute
from gpu_engine.sweep_grid import Shape
from gpu_engine.weights import WeightLoadError
from sim.config import Scenario
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown
from sim.metrics import Recorder
from sim.prefix_stats import PrefixCacheCounts
from sim.request import Request
from sim.scheduler import Scheduler, build_scheduler
from sim.workload import Workload, all_prompt_token_ids, generate_workload, make_request

# On CPU, one torch thread, as `planner calibrate --device cpu` measures: a profile then fits the runs, and on
# a shared 2-core machine a second thread turned other processes' time slices into whole-step stalls.
CPU_THREADS = 1
WARMUP_REQUESTS = 2  # short requests run to completion before the clock starts (kernels, allocator)
PROBE_EVERY_S, PROBE_REPEATS = 0.2, 3  # with a reference step on CPU: how often it is timed during a run


class EngineError(Exception):
    """Why the live engine cannot run this scenario here (the CLI prints it as one message)."""


@dataclass
class LiveResult:
    workload: Workload
    recorder: Recorder
    memory: dict  # measured at start-up, the memory model's keys: weights_bytes, activation_bytes, ...
    extra: dict  # device, device_name, peak_memory_bytes, memory_predicted, weights, sampling
    drafts: dict | None = None  # speculative decoding: the steps that drafted, timed (sim.draft_cost.DRAFT_COLUMNS)


def _eager(scenario: Scenario) -> Scenario:
    return dataclasses.replace(scenario, engine=dataclasses.replace(scenario.engine, enforce_eager=True))


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise EngineError("--device cuda: no CUDA device is visible to torch (use --device cpu)")
    return torch.device(name)


def drain(
    scheduler: Scheduler,
    runner: ModelRunner,
    clock: Callable[[], float],
    on_finished: Callable[[Request], None] = lambda r: None,
) -> None:
    """Step until no request is waiting or running."""
    while scheduler.num_unfinished:
        step(scheduler, runner, clock, on_finished)


def step(
    scheduler: Scheduler,
    runner: ModelRunner,
    clock: Callable[[], float],
    on_finished: Callable[[Request], None],
    start: float | None = None,
) -> None:
    """One schedule -> execute -> update round, recorded in the scheduler's recorder.

    The row carries the step's host side (wall time from `start` (default: now) through schedule() and
    update()) and its device side (the runner's execute(): input preparation, forward, sampling, up to the
    `.tolist()` that waits for the device); this engine is synchronous, so the step lasts their sum. Tokens
    are stamped when execute() returns."""
    start = clock() if start is None else start
    out = scheduler.schedule()
    if not out.scheduled:
        raise RuntimeError(f"no request can be scheduled with {scheduler.kv.pool.num_free_blocks} free blocks")
    execute(scheduler, runner, clock, on_finished, out, start)


def warm_up(facts: EngineFacts, runner: ModelRunner, workload: Workload, num_blocks: int) -> None:
    facts = dataclasses.replace(facts, engine=dataclasses.replace(facts.engine, kv_offload=None))  # no host tier
    scheduler = build_scheduler(facts, num_blocks, Recorder(num_blocks, facts.engine.block_size, False), seed=0)
    for index in range(min(WARMUP_REQUESTS, len(workload))):
        request = make_request(workload, index, 0.0, with_token_ids=True)
        request.max_output_tokens = min(request.max_output_tokens, 4)
        scheduler.add_request(request)
    drain(scheduler, runner, time.perf_counter)


class Arrivals:
    """When each request is due: the workload's times (open loop), a reply + think time (closed loop), or, for
    sessions whose turns wait for replies, a first turn's time and each later turn's predecessor's reply + its
    think time (the simulator's sim/simulation.py alike)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.issued = 0
        self.due: list[tuple[float, int]] = []  # heap of (arrival_s, request index)
        self.next_turns = None if workload.follows is None else workload.next_turns()
        if self.next_turns is not None:
            for index in (i for i, follows in enumerate(workload.follows.tolist()) if follows < 0):
                heapq.heappush(self.due, (float(workload.arrival_s[index]), index))
        elif workload.arrival_s is not None:
            for arrival_s in workload.arrival_s.tolist():
                self._issue(arrival_s)
        else:  # each user's first request, at its start (the simulator's users start alike)
            for user in range(min(workload.concurrency or 1, len(workload))):
                self._issue(workload.user_start_s(user))

    def _issue(self, arrival_s: float) -> None:
        heapq.heappush(self.due, (arrival_s, self.issued))
        self.issued += 1

    def reply_done(self, now_s: float, index: int) -> None:
        """Request `index`'s reply was complete at now_s."""
        if self.next_turns is not None:
            after = int(self.next_turns[index])
            if after >= 0:
                heapq.heappush(self.due, (now_s + float(self.workload.think_s[after]), after))
        elif self.workload.arrival_s is None and self.issued < len(self.workload):
            self._issue(now_s + self.workload.think_time_s)

    def pop_due(self, now_s: float) -> list[tuple[float, int]]:
        ready = []
        while self.due and self.due[0][0] <= now_s:
            ready.append(heapq.heappop(self.due))
        return ready

    def next_s(self) -> float | None:
        return self.due[0][0] if self.due else None


def run_scenario(
    scenario: Scenario,
    device: str = "cuda",
    model_path: Path | None = None,
    sampling: SamplingParams | None = None,
    progress: Callable[[int, int], None] | None = None,
    reference: Shape | None = None,
) -> LiveResult:
    """Run the scenario for real (greedy unless `sampling` says otherwise); `progress(done, total)` is
    called as requests finish. With a `reference` step shape (gpu_engine.reference_step.reference_shape), its
    time before and after the run goes into extra["reference_step_s"] and, on CPU, every PROBE_EVERY_S during it
    into extra["reference_during_s"]: calibration's check that the machine ran this run as fast as it ran
    the sweep."""
    sampling = sampling or SamplingParams()
    if scenario.hardware.num_gpus > 1 or scenario.hardware.replicas > 1:
        raise EngineError(
            f"{scenario.source}: the live engine runs one GPU: tensor_parallel_size, data_parallel_size and replicas"
            " must be 1 (simulate larger deployments with `planner simulate`)"
        )
    if scenario.engine.scheduler == "static":
        raise EngineError(
            f"{scenario.source}: engine.scheduler static: the live engine computes each row's own tokens, not the"
            " padded batch that static batching (transformers' generate) computes and the simulator prices, so its"
            " steps would be neither the simulated ones nor fit for calibration; static is simulated only"
            " (`planner simulate`); the live engine runs engine.scheduler continuous"
        )
    unsupported = scenario.model.live_engine_unsupported()
    if unsupported:  # never run such a model as the dense Llama it is not
        raise EngineError(
            f"{scenario.source}: model {scenario.model.name}: the live engine does not implement "
            f"{', '.join(unsupported)}; `planner simulate` and `planner memory` model it"
        )
    if speculative.unsupported(scenario):
        raise EngineError(f"{scenario.source}: {speculative.unsupported(scenario)}")
    if scenario.kv_dtype != scenario.dtype:
        raise EngineError(
            f"{scenario.source}: engine.kv_cache_dtype {scenario.engine.kv_cache_dtype}: the live engine keeps the"
            f" KV cache in the model dtype ({scenario.dtype}); set kv_cache_dtype: auto to run this scenario"
        )
    e, facts = scenario.engine, EngineFacts.of(scenario)
    torch_device = _device(device)
    if torch_device.type == "cpu":
        torch.set_num_threads(CPU_THREADS)
    workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
    try:
        runner = ModelRunner(
            scenario.model,
            scenario.dtype,
            torch_device,
            None,
            e.block_size,
            seed=scenario.workload.seed,
            sampling=sampling,
            weights_path=None if model_path is None else str(model_path),
            # The decode batches the simulator replays from CUDA graphs (none under enforce_eager); a decode
            # batch never exceeds max_num_seqs, so no larger graph is captured.
            cuda_graph_sizes=capture_sizes(min(e.max_num_seqs, facts.cudagraph_capture_size)),
        )
    except WeightLoadError as err:
        raise EngineError(f"--model-path {model_path}: {err}") from err
    if e.speculative is not None:  # drafts for the verify rows (gpu_engine/speculative.py)
        runner = speculative.SpeculativeRunner(runner, e.speculative, scenario.workload.seed)
    total = None if torch_device.type == "cuda" else scenario.hardware.gpu.memory_bytes
    measured = profile_num_blocks(runner, e.max_num_batched_tokens, e.max_num_seqs, e.gpu_memory_utilization, total)
    num_blocks = e.num_gpu_blocks_override or measured["num_gpu_blocks"]
    if num_blocks - 1 < -(-scenario.max_model_len // e.block_size):  # block 0 is the null block
        raise EngineError(
            f"{scenario.source}: the measured KV pool holds {num_blocks} blocks of {e.block_size}"
            f" tokens (one is the null block), less than one request of max_model_len {scenario.max_model_len}"
        )
    runner.allocate(num_blocks)
    warm_up(facts, runner, workload, num_blocks)
    if e.speculative is not None:  # what warm-up drafted is not the run's
        runner.reset_drafting()
    if torch_device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(torch_device)

    recorder = Recorder(num_blocks, e.block_size, record_steps=True)
    if workload.block_ids is not None or e.kv_offload is not None:  # as the simulator's (sim/simulation.py)
        recorder.prefix = PrefixCacheCounts.of(e.kv_offload)
    scheduler = build_scheduler(facts, num_blocks, recorder, seed=scenario.workload.seed)
    host = HostCopies(scheduler, runner) if scheduler.kv.host is not None else None  # a host KV tier's copies
    arrivals = Arrivals(workload)
    finished_count = 0

    def on_finished(request: Request) -> None:
        nonlocal finished_count
        finished_count += 1
        arrivals.reply_done(request.finished_s, request.request_id)
        if progress is not None:
            progress(finished_count, len(workload))

    prompts = all_prompt_token_ids(workload)  # tokenized before the run, as a server receives them
    probe = None if reference is None else ReferenceProbe(runner, reference)
    reference_s = [] if probe is None else [probe.time()]
    # On CPU the machine's speed can change within a run (other processes, other virtual machines on the
    # host): the reference step is timed again every PROBE_EVERY_S of the run, between two steps, on the
    # probe's own KV cache, with the run's clock stopped meanwhile so that the run does not see it.
    probe_every_s = PROBE_EVERY_S if probe is not None and probe.own_cache else None
    during_s: list[float] = []
    paused_s = last_probe_s = 0.0
    busy_wall_s = busy_cpu_s = 0.0  # over the steps: wall time, and this thread's CPU time
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0 - paused_s
    # A busy engine's steps tile its time: each starts where the last one's bookkeeping (recording the step,
    # finishing requests) ended, so the loop's own work (that, and admitting arrivals) is host time of the
    # next step, as the simulator's back-to-back steps count it, not a gap the simulator never sees.
    step_start = None  # None: idle, the next step starts when the loop finds work
    others = OtherCpuMeter()
    while scheduler.num_unfinished or arrivals.due:
        loop_start, cpu_s = clock() if step_start is None else step_start, time.thread_time()
        for arrival_s, index in arrivals.pop_due(clock()):
            scheduler.add_request(make_request(workload, index, arrival_s, with_token_ids=prompts[index]))
        if not scheduler.num_unfinished:
            time.sleep(max(0.0, arrivals.next_s() - clock()))
            step_start = None
            continue
        if host is None:
            step(scheduler, runner, clock, on_finished, start=loop_start)
        else:
            host.step(clock, on_finished, loop_start)
        if e.speculative is not None:  # its drafting keyed by its row in steps.csv (planner calibrate --from)
            runner.mark_step(recorder.num_steps - 1)
        step_start = clock()
        busy_wall_s += step_start - loop_start
        busy_cpu_s += time.thread_time() - cpu_s
        if probe_every_s is not None and step_start - last_probe_s >= probe_every_s:
            # Right after a step, never right after an idle spell: a probe there would time the machine's wake-up
            # (a busy machine, it would say) and warm it for the step that follows, which then hides its own
            # (CostCoefficients.idle_wake_s).
            paused_at = time.perf_counter()
            during_s.append(probe.time(repeats=PROBE_REPEATS, warmup=1))
            paused_s += time.perf_counter() - paused_at
            last_probe_s = step_start = clock()
    if host is not None:
        host.close()
    if probe is not None:
        reference_s.append(probe.time())
    if recorder.spec is not None:  # the time shares, measured: proposing, and every step
        recorder.spec.draft_s, recorder.spec.step_s = runner.draft_s, busy_wall_s

    measured["block_size"] = e.block_size
    measured["num_gpu_blocks"] = num_blocks
    extra = {
        "device": torch_device.type,
        "device_name": torch.cuda.get_device_name(torch_device) if torch_device.type == "cuda" else "cpu",
        "peak_memory_bytes": _peak_memory_bytes(torch_device),
        # as this engine runs: eager, so vLLM's CUDA-graph memory estimate is not taken from its pool
        "memory_predicted": memory_breakdown(EngineFacts.of(_eager(scenario))).to_dict(),
        "weights": "random" if model_path is None else str(model_path),
        "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p},
        # On CPU (one torch thread, the caller's) the engine computes only while it holds the CPU: the share of
        # its busy wall time that it did says how much other processes delayed its steps. On CUDA the thread
        # also waits for the GPU, so the share says nothing there.
        "cpu_share": busy_cpu_s / busy_wall_s if torch_device.type == "cpu" and busy_wall_s > 0 else None,
        # ... and any other busy process slows a CPU engine's steps, on its core or not (gpu_engine/host_load.py)
        "other_cpu_load": others.load() if torch_device.type == "cpu" else None,
    }
    if reference_s:
        extra["reference_step_s"] = reference_s  # before and after the run
        extra["reference_during_s"] = during_s  # every PROBE_EVERY_S of the run (CPU)
    drafts = runner.drafting_rows() if e.speculative is not None else None
    return LiveResult(workload, recorder, measured, extra, drafts)


def _peak_memory_bytes(device: torch.device) -> int:
    """torch's peak allocation on CUDA; the process's peak resident set on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB
