"""The live engine as a prefill/decode pair: two engines in one process, each prompt's KV copied between caches.

The flow is sim/fleet.py's (vLLM's disaggregated serving), on sim/'s own schedulers: the prefill engine prefills
each request with max_tokens 1 and holds its blocks (`Scheduler.sending`); the decode engine's scheduler allocates
the prompt's blocks and parks the request (WAITING_FOR_REMOTE_KVS); the pull is a copy of the prompt's blocks from
the prefill engine's cache into the decode engine's, timed, after which the prefill engine frees them and the
decode engine recomputes the prompt's last token to sample the first. Both engines have the same weights (the same
seed) and block size, so the decode engine continues exactly as one engine would.

Simplified against the simulator: one thread runs both engines, so their steps take turns instead of overlapping,
and a pull is a synchronous copy between two steps (its wall time is the transfer's), where the simulator prices
it on the link while the engines step. Each engine's steps are therefore the same in kind (the same requests, the
same tokens); their times, and so how requests interleave under load, differ.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from gpu_engine.engine import CPU_THREADS, Arrivals, EngineError, _device, warm_up
from gpu_engine.runner import ModelRunner, SamplingParams
from gpu_engine.step_execute import execute
from sim.engine_facts import EngineFacts
from sim.fleet import FleetResult, PoolRecorder, PoolRun
from sim.kv_transfer import TransferLog, kv_transfer_bytes
from sim.memory import memory_breakdown
from sim.metrics import Recorder
from sim.request import Request
from sim.scheduler import build_scheduler
from sim.workload import all_prompt_token_ids, generate_workload, make_request


def run_pd_pair(
    scenario, device: str = "cpu", progress: Callable[[int, int], None] | None = None, sampling=None
) -> FleetResult:
    """Run a fleet of one prefill and one decode engine (one GPU each) for real; the result is a fleet run's."""
    fleet = scenario.fleet
    # A pool's GPUs: its replicas' tensor-parallel groups, each data-parallel rank's own (num_gpus)
    if not fleet.disaggregated or any(p.hardware.replicas * p.hardware.num_gpus > 1 for p in fleet.pools):
        raise EngineError(
            f"{scenario.source}: the live engine runs a fleet of one prefill and one decode engine on one GPU each"
            f" ({fleet.describe()}): simulate larger fleets, and data-parallel pools, with `planner simulate`"
        )
    torch_device = _device(device)
    if torch_device.type == "cpu":
        torch.set_num_threads(CPU_THREADS)
    workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
    client = Recorder(1, scenario.engine.block_size, record_steps=False)
    pools, runners, schedulers = [], [], []
    for index, pool in enumerate(fleet.pools):  # validation: the prefill pool and the decode pool
        pool_scenario = scenario.pool_scenario(pool)
        facts = EngineFacts.of(pool_scenario)
        e = pool.engine
        if not e.num_gpu_blocks_override:
            raise EngineError(
                f"{scenario.source}: fleet.pools.{pool.name}.engine.num_gpu_blocks_override: the live pair needs"
                " each engine's pool size given (two engines share this machine's memory)"
            )
        runner = ModelRunner(
            scenario.model, scenario.dtype, torch_device, e.num_gpu_blocks_override, e.block_size,
            seed=scenario.workload.seed, sampling=sampling or SamplingParams(), cuda_graph_sizes=(),
        )  # fmt: skip
        warm_up(facts, runner, workload, e.num_gpu_blocks_override)
        recorder = PoolRecorder(
            e.num_gpu_blocks_override, e.block_size, True, None if pool.role == "prefill" else client
        )
        scheduler = build_scheduler(facts, e.num_gpu_blocks_override, recorder, index)
        memory = memory_breakdown(facts)  # the model's figures: the pair's memory is not measured per engine
        pools.append(PoolRun(pool, pool_scenario, facts, memory, None, e.num_gpu_blocks_override, recorder))
        runners.append(runner)
        schedulers.append(scheduler)
    prefill_at = next(i for i, p in enumerate(fleet.pools) if p.role == "prefill")
    (p_sched, d_sched), (p_runner, d_runner) = (
        (schedulers[prefill_at], schedulers[1 - prefill_at]),
        (runners[prefill_at], runners[1 - prefill_at]),
    )
    decode_facts = pools[1 - prefill_at].facts
    transfers = TransferLog()
    pending: dict[int, tuple[Request, Request]] = {}  # request id -> (its prefill copy, the decode side's)
    pulls: list[tuple[Request, int]] = []  # started by the decode scheduler, copied after its step
    d_sched.on_remote_load = lambda request, num_tokens: pulls.append((request, num_tokens))
    arrivals = Arrivals(workload)
    finished = 0
    prompts = all_prompt_token_ids(workload)  # tokenized before the run, as a server receives them (engine.py)
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0

    def on_prefilled(prefilled: Request) -> None:
        request = pending[prefilled.request_id][1]
        request.do_remote_prefill = True
        d_sched.add_request(request)

    def on_finished(request: Request) -> None:
        nonlocal finished
        finished += 1
        arrivals.reply_done(request.finished_s, request.request_id)
        if progress is not None:
            progress(finished, len(workload))

    while finished < len(workload):
        for arrival_s, index in arrivals.pop_due(clock()):
            request = make_request(workload, index, arrival_s, with_token_ids=prompts[index])
            prefilled = make_request(workload, index, arrival_s, with_token_ids=prompts[index])
            prefilled.max_output_tokens, prefilled.do_remote_decode = 1, True
            pending[index] = (prefilled, request)
            p_sched.add_request(prefilled)
        stepped = False
        for scheduler, runner, done in ((p_sched, p_runner, on_prefilled), (d_sched, d_runner, on_finished)):
            if scheduler.num_unfinished:
                start = clock()
                out = scheduler.schedule()
                if out.scheduled:
                    execute(scheduler, runner, clock, done, out, start)
                    stepped = True
            for request, num_tokens in pulls:
                prefilled = pending.pop(request.request_id)[0]
                num_bytes = kv_transfer_bytes(decode_facts, num_tokens)  # what the simulator prices
                _pull(prefilled, request, num_tokens, num_bytes, p_runner, d_runner, clock, transfers)
                p_sched.finish_sending(prefilled)
                d_sched.add_request(request)  # its KV is there: schedulable
            stepped = stepped or bool(pulls)
            pulls.clear()
        if not stepped:
            next_s = arrivals.next_s()
            if next_s is None:
                raise EngineError(
                    f"{scenario.source}: no request can be scheduled with {d_sched.kv.pool.num_free_blocks} free"
                    " blocks on the decode engine: its pool is too small"
                )
            time.sleep(max(0.0, next_s - clock()))
    return FleetResult(scenario, workload, pools, client, transfers, 0.0)


def _pull(prefilled: Request, request: Request, num_tokens: int, num_bytes: int, source, destination, clock, log):
    """Copy the prompt's pulled blocks (those past the decode side's local hits) between the two caches, timed."""
    block_size = source.block_size
    first = (request.num_prompt_tokens - num_tokens) // block_size
    stop = -(-request.num_prompt_tokens // block_size)
    start_s = clock()
    src = torch.tensor(prefilled.block_ids[first:stop], device=source.device)
    dst = torch.tensor(request.block_ids[first:stop], device=destination.device)
    for (k_src, v_src), (k_dst, v_dst) in zip(source.kv_caches, destination.kv_caches):
        k_dst[dst] = k_src[src]
        v_dst[dst] = v_src[src]
    if destination.device.type == "cuda":
        torch.cuda.synchronize(destination.device)
    log.add(start_s, clock(), num_tokens, num_bytes)
