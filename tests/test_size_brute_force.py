"""`planner size` against brute force: on a small grid (2 GPUs x 2 tensor parallel x 2 max_num_seqs, fixed seed)
every candidate is simulated at 1, 2, 3... replicas until it meets the SLOs (more replicas only cost more), with
the very probe the search runs; the cheapest setups found so must be what the search recommends, with its bound
pruning on (the product's default) and off (every candidate searched)."""

from __future__ import annotations

import math

from helpers import ROOT

from planner.sizing.candidates import enumerate_candidates
from planner.sizing.money import costs, objective_usd_per_month, prices
from planner.sizing.probe import run_probe
from planner.sizing.rank import rank
from planner.sizing.search import run_search
from planner.sizing.spec import load_sizing

GRID = [
    "search.candidates.gpus=[a10, l4]",
    "search.candidates.tensor_parallel_sizes=[1, 2]",
    "search.candidates.engine.max_num_seqs=[8, 32]",
    "search.probe.num_requests=40",
    # users are whole numbers: bisect to one user apart, so the search's capacity is the largest load that passes
    "search.probe.max_probes=12",
    "search.probe.tolerance=0.001",
]


def brute_force(q) -> dict[tuple[str, int], float]:
    """Each candidate's cheapest (label, replicas) that meets the demand, and its monthly cost."""
    d, money = q.search.demand, q.search.money
    assert d.kind == "users"
    found: dict[tuple[str, int], float] = {}
    for c in enumerate_candidates(q)[0]:

        def met(users: int, c=c) -> bool:
            return run_probe(c.scenario, "users", users, q.search.probe.num_requests, c.coefficients).met

        for replicas in range(1, math.ceil(d.value * d.headroom) + 1):
            # sized for the demand with headroom, and run at its share of the demand itself (as the search does)
            if met(math.ceil(d.value * d.headroom / replicas)) and met(math.ceil(d.value / replicas)):
                num_gpus = replicas * c.tensor_parallel_size
                found[(c.label, replicas)] = objective_usd_per_month(
                    costs(prices(c.gpu, money), money, num_gpus, 1.0), money.objective
                )
                break  # the cheapest for this candidate: more replicas cost more
    return found


def test_the_search_recommends_the_cheapest_setup_brute_force_finds():
    q = load_sizing(ROOT / "scenarios" / "a10_qwen7b.yaml", GRID)
    found = brute_force(q)
    cheapest = min(found.values())
    setups = {setup for setup, cost in found.items() if cost == cheapest}
    assert len(found) >= 2  # a choice to make: more than one candidate can serve the demand
    for pruning in ("true", "false"):
        out = run_search(load_sizing(ROOT / "scenarios" / "a10_qwen7b.yaml", [*GRID, f"search.candidates.bound_pruning={pruning}"]), workers=1)  # fmt: skip
        best = rank(out).recommended
        assert best is not None, pruning
        assert (best.candidate.label, best.evaluation.replicas) in setups, (pruning, setups)
        assert best.objective_usd_per_month == cheapest
        if pruning == "false":  # nothing left unsimulated for its cost floor
            assert not any("no cheaper than" in r.note for r in out.results)
        # what the search did not simulate (its cost floor, or one request's decode step over the TPOT bound)
        # brute force could not make meet the SLOs any cheaper
        for r in out.results:
            if r.evaluation is None:
                assert all(cost >= cheapest for (label, _), cost in found.items() if label == r.candidate.label)
                if "decode step takes" in r.note:
                    assert not any(label == r.candidate.label for label, _ in found), r.note
