"""What a prefix cache of a given size could find in a workload, timing aside: `python -m planner.outputs.prefix_reuse
SCENARIO`.

Every prompt, in arrival order, looks up its leading full blocks in an LRU cache of blocks (the keys the simulator's
block pool uses, Request.block_content_keys), then puts all its full blocks in it: no two requests at once, no
block held by a running request, no reply blocks. Capacities: the scenario's GPU pool (its memory model's
num_gpu_blocks), multiples of it, and unbounded. It bounds what a larger cache (a host tier) can find, and checks
the simulator's hit rate with the GPU pool alone (tests/test_trace_prefix_ids.py).
"""

from __future__ import annotations

import argparse
import math
from collections import OrderedDict

from planner.scenario.load import load_scenario
from sim.config import Scenario
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown
from sim.workload import generate_workload, make_request

MULTIPLES = (1, 2, 4, 8, 16)  # of the GPU pool's blocks


def lru_hit_rates(scenario: Scenario, capacities_blocks: list[float]) -> list[float]:
    """The share of prompt tokens found cached, per capacity in blocks (math.inf: unbounded)."""
    s, bs = scenario, scenario.engine.block_size
    wl = generate_workload(s.workload, s.max_model_len, s.model.vocab_size)
    caches = [OrderedDict() for _ in capacities_blocks]
    hit_tokens, prompt_tokens = [0] * len(caches), 0
    for i in range(len(wl)):
        request = make_request(wl, i, 0.0)
        keys = request.block_content_keys(0, request.num_prompt_tokens // bs, bs)
        looked_up = keys[: (request.num_prompt_tokens - 1) // bs]  # the last prompt token is always computed
        prompt_tokens += request.num_prompt_tokens
        for k, (cache, capacity) in enumerate(zip(caches, capacities_blocks, strict=True)):
            found = next((j for j, key in enumerate(looked_up) if key not in cache), len(looked_up))
            hit_tokens[k] += found * bs
            for key in keys:
                cache[key] = None
                cache.move_to_end(key)
            while len(cache) > capacity:
                cache.popitem(last=False)
    return [h / prompt_tokens for h in hit_tokens]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("--gib", type=float, action="append", default=[], help="a cache of this many GiB per GPU too")
    args = parser.parse_args(argv)
    s = load_scenario(args.scenario)
    mem = memory_breakdown(EngineFacts.of(s))
    rows = [(f"{m} x the GPU pool ({m * mem.num_gpu_blocks:,} blocks)", m * mem.num_gpu_blocks) for m in MULTIPLES]
    for gib in args.gib:  # as a tier of that size holds them: whole blocks
        blocks = int(gib * 2**30) // mem.block_bytes
        rows.append((f"{gib:,g} GiB ({blocks:,} blocks)", blocks))
    rates = lru_hit_rates(s, [blocks for _, blocks in rows] + [math.inf])
    print("| LRU cache of | GiB per GPU | prompt tokens found cached |")
    print("| --- | --- | --- |")
    for (size, blocks), rate in zip(rows, rates, strict=False):
        print(f"| {size} | {blocks * mem.block_bytes / 2**30:,.1f} | {rate * 100:.1f}% |")
    print(f"| unbounded |  | {rates[-1] * 100:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
