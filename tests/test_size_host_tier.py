"""`planner size` weighs a KV tier in host memory (`search.candidates.engine.kv_offload`, off or a size per GPU)
against more GPUs: each setting a candidate, its host memory priced at `search.money`'s host memory rates, its serve
line carrying vLLM's offloading flags; a sessions workload's demand is the rate its turns arrive at."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import ROOT

from planner.errors import ScenarioError
from planner.scenario.load import load_scenario
from planner.sizing.candidates import enumerate_candidates
from planner.sizing.probe import scenario_at, sessions_request_rate
from planner.sizing.rank import rank
from planner.sizing.search import run_search
from planner.sizing.serve import vllm_serve_command
from planner.sizing.spec import load_sizing
from sim.workload import generate_workload

BASE = ROOT / "scenarios/size_a10_qwen7b.yaml"
SESSIONS = ROOT / "scenarios/h100_llama31_8b_agent_sessions.yaml"
TIER = "{size_gib: 64, host_link_gb_s: 50, host_memory_gib: 128}"
SMALL = [
    "search.candidates.gpus=[h100-sxm]",
    "search.candidates.tensor_parallel_sizes=[1, 2]",
    f"search.candidates.engine={{enable_prefix_caching: [true], kv_offload: [null, {TIER}]}}",
    "search.probe.num_requests=60",
    "search.probe.max_probes=4",
]


def test_the_host_tier_is_a_candidate_setting_with_its_serve_flags():
    kept, _ = enumerate_candidates(load_sizing(BASE, SMALL))
    by_label = {c.label: c for c in kept}
    assert set(by_label) == {
        "h100-sxm tp1, prefix-cache on, host tier off",
        "h100-sxm tp1, prefix-cache on, host tier 64 GiB",
        "h100-sxm tp2, prefix-cache on, host tier off",
        "h100-sxm tp2, prefix-cache on, host tier 64 GiB",
    }
    tier = by_label["h100-sxm tp2, prefix-cache on, host tier 64 GiB"]
    assert tier.host_memory_gib == 128  # 64 GiB on each of its 2 GPUs
    assert by_label["h100-sxm tp2, prefix-cache on, host tier off"].host_memory_gib == 0
    # vLLM's --kv-offloading-size is the engine's whole tier, split over its ranks
    assert vllm_serve_command(tier.scenario).endswith("--kv-offloading-backend native --kv-offloading-size 128")
    assert "--kv-offloading" not in vllm_serve_command(
        by_label["h100-sxm tp1, prefix-cache on, host tier off"].scenario
    )


@pytest.mark.parametrize(("rent", "buy"), [(0.0, 0.0), (0.01, 4.0)])
def test_the_host_memory_is_priced_with_the_gpus(rent, buy):
    q = load_sizing(
        BASE,
        [
            *(item for item in SMALL if "tensor_parallel" not in item),
            "search.candidates.tensor_parallel_sizes=[1]",
            "search.money.objective=both",
            f"search.money.host_memory_usd_per_gib_hour={rent}",
            f"search.money.host_memory_usd_per_gib={buy}",
        ],
    )
    out = run_search(q, workers=1)
    rank(out)
    for r in out.evaluated:
        if r.costs is None:
            continue
        gpus, host_gib = r.costs.num_gpus, r.costs.host_memory_gib
        assert host_gib == pytest.approx(64 * gpus if "64 GiB" in r.candidate.label else 0)
        gpu = r.candidate.gpu
        assert r.costs.rental_usd_per_hour == pytest.approx(gpu.rental_usd_per_hour * gpus + rent * host_gib)
        assert r.costs.purchase_capex_usd == pytest.approx(gpu.purchase_usd * gpus + buy * host_gib)
    assert any(r.costs is not None and r.costs.host_memory_gib for r in out.evaluated)


def test_a_sessions_workload_is_sized_by_its_steady_turns_rate():
    q = load_sizing(SESSIONS, ["search.candidates.gpus=[h100-sxm]", "search.candidates.tensor_parallel_sizes=[1]"])
    s = q.scenario
    steady = dataclasses.replace(s.workload, sessions=dataclasses.replace(s.workload.sessions, start="steady"))
    wl = generate_workload(steady, s.max_model_len)
    turns_per_s = (len(wl) - 1) / float(wl.arrival_s[-1] - wl.arrival_s[0])
    assert q.search.demand.kind == "rate" and q.search.demand.value == pytest.approx(turns_per_s)
    # a probe runs sessions under way from the start, their rate scaled so their turns arrive at about the load
    at = scenario_at(s, "rate", 2 * turns_per_s, 3000)
    assert at.workload.sessions.start == "steady"
    assert at.workload.sessions.rate == pytest.approx(2 * s.workload.sessions.rate)
    assert sessions_request_rate(at.workload, at.max_model_len) == pytest.approx(2 * turns_per_s, rel=0.1)


def test_sessions_under_way_send_turns_at_a_steady_rate_from_the_start():
    s = load_scenario(SESSIONS)
    quarters = {}
    for start in ("empty", "steady"):
        w = dataclasses.replace(s.workload, sessions=dataclasses.replace(s.workload.sessions, start=start))
        arrival_s = generate_workload(w, s.max_model_len).arrival_s
        quarters[start] = np.histogram(arrival_s, bins=4, range=(0.0, float(arrival_s[-1])))[0]
    # from an empty start the turns come faster as sessions accumulate; under way, the first quarter is no lighter
    empty, steady = quarters["empty"], quarters["steady"]
    assert empty[0] < 0.7 * empty[1:].mean()
    assert steady[0] > 0.9 * steady[1:].mean()


def test_users_are_not_a_sessions_workloads_load():
    with pytest.raises(ScenarioError) as e:
        load_sizing(SESSIONS, ["search.demand={concurrency: 50}"])
    assert "search.demand.concurrency = 50" in str(e.value) and "give search.demand.rate" in str(e.value)


@pytest.mark.parametrize(
    ("item", "key"),
    [
        ("search.money.host_memory_usd_per_gib_hour=-1", "search.money.host_memory_usd_per_gib_hour = -1"),
        ("search.money.host_memory_usd_per_gib=1e9", "search.money.host_memory_usd_per_gib = 1000000000"),
    ],
)
def test_bad_host_memory_prices_are_refused(item, key):
    with pytest.raises(ScenarioError) as e:
        load_sizing(BASE, [item])
    assert key in str(e.value) and "USD per GiB" in str(e.value)
