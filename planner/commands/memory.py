"""`planner memory`: the memory model's breakdown (weights, activations, KV blocks) and whether it fits."""

from __future__ import annotations

import json

from planner.commands.catalog import params_text
from planner.commands.scenario_checks import load_scenario_args
from planner.errors import EXIT_USAGE, PlannerError


def _mean_request_tokens(scenario) -> float:
    from sim.workload import generate_workload

    wl = generate_workload(scenario.workload, scenario.max_model_len)
    return float((wl.prompt_tokens + wl.output_tokens).mean()) if len(wl) else 0.0


def tokens_held(scenario, mean_tokens: float) -> tuple[float, str]:
    """The KV, in tokens, that a running request of the workload's mean length holds, and how to say it: its
    own tokens when paged; max_model_len under contiguous KV, whatever its length (each reserves it up front).
    (0, ""): the workload keeps no request."""
    if not mean_tokens:
        return 0.0, ""
    if scenario.engine.kv_cache == "contiguous":
        held = max(mean_tokens, scenario.max_model_len)
        return held, f"each reserving max_model_len, {held:,.0f} tokens (contiguous KV)"
    said = f"at the workload's mean of {mean_tokens:,.0f} tokens"
    if scenario.engine.scheduler == "static":
        said += " (the static scheduler pads a batch's rows to its longest prompt + reply: fewer in practice)"
    return mean_tokens, said


def cmd_memory(args) -> int:
    scenario = load_scenario_args(args)
    if scenario.fleet is not None:  # each pool's own memory model, one after the other
        if args.json:
            raise PlannerError("--json: planner memory of a fleet prints each pool's breakdown as text only")
        statuses = []
        for pool in scenario.fleet.pools:
            print(f"pool {pool.name} ({pool.role}):")
            statuses.append(_memory_of(args, scenario.pool_scenario(pool)))
            print()
        return max(statuses)
    return _memory_of(args, scenario)


def _memory_of(args, scenario) -> int:
    from planner.outputs.report import memory_lines
    from sim.engine_facts import EngineFacts
    from sim.host_tier import host_memory, host_memory_line
    from sim.memory import memory_breakdown
    from sim.memory_fit import fit_problems

    facts = EngineFacts.of(scenario)
    mem = memory_breakdown(facts)
    mean_tokens = _mean_request_tokens(scenario)
    held, held_said = tokens_held(scenario, mean_tokens)
    problems = fit_problems(facts, mem)
    offload, tp = scenario.engine.kv_offload, scenario.hardware.tensor_parallel_size
    if args.json:
        print(
            json.dumps(
                mem.to_dict()
                | {
                    # the resolved limits the activation and CUDA-graph terms were sized with
                    "max_num_batched_tokens": scenario.engine.max_num_batched_tokens,
                    "max_num_seqs": scenario.engine.max_num_seqs,
                    # What is left for KV, never negative; a deployment that does not fit says by how much.
                    "kv_cache_bytes": max(mem.kv_cache_bytes, 0),
                    "kv_cache_shortfall_bytes": max(-mem.kv_cache_bytes, 0),
                    "mean_request_tokens": mean_tokens,
                    # requests of the mean length that run at once (contiguous KV: each holds max_model_len)
                    "requests_at_mean_length": mem.requests_that_fit(held) if held else None,
                    "fits": not problems,
                    "problems": problems,
                }
                | ({"kv_offload": host_memory(offload, mem, tp)} if offload is not None else {}),
                indent=2,
            )
        )
    else:
        print(
            f"{scenario.name}: {scenario.model.name} ({params_text(scenario.model.num_params)} params, "
            f"{scenario.dtype}) on {scenario.hardware.describe()}"
        )
        print("\n".join(memory_lines(mem, scenario.hardware.tensor_parallel_size, held, held_said)))
        if offload is not None:
            print(host_memory_line(host_memory(offload, mem, tp)))
        for problem in problems:
            print(f"cannot run: {problem}")
    return EXIT_USAGE if problems else 0
