"""`planner size` weighs units of two pools behind a router by prompt length (`search.length_routed`) against the
aggregated candidates: each unit the fleet a scenario file would describe (`router.policy: length`), sized by the
same probes, bounded by each pool's share of the requests, priced per pool."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT

from planner.sizing.llmd_values import llmd_values
from planner.sizing.probe import scenario_at
from planner.sizing.search import split_shapes, tightest, workload_shape
from planner.sizing.spec import load_sizing
from planner.sizing.topology import compare_topologies, enumerate_units, unit_bound
from sim.workload import generate_workload

SIZING = "scenarios/size_llama31_8b_length_routed.yaml"
SMALL = ["search.probe.num_requests=200", "search.probe.max_probes=5"]


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def test_a_unit_is_two_mixed_pools_behind_the_length_router():
    q = load_sizing(ROOT / SIZING, SMALL)
    units, pruned = enumerate_units(q)
    assert not pruned
    assert len(units) == 2 * 4  # thresholds x ratios
    u = next(u for u in units if u.label == "2S1L at 4,096 tokens: short l40s tp1, long h100-sxm tp1")
    fleet = u.scenario.fleet
    assert (fleet.router.policy, fleet.router.threshold_tokens) == ("length", 4096)
    assert (fleet.router.short_pool, fleet.router.long_pool) == ("short", "long")
    assert [(p.name, p.role, p.hardware.gpu.name, p.hardware.replicas) for p in fleet.pools] == [
        ("short", "mixed", "l40s", 2),
        ("long", "mixed", "h100-sxm", 1),
    ]
    assert u.kind == "length-routed" and u.num_gpus() == 3 and fleet.kv_transfer is None
    # the chart has no router by prompt length: no manifest for such a unit
    assert llmd_values(None, 0, u.scenario, 2) is None


def test_each_pool_gets_its_side_of_the_threshold():
    q = load_sizing(ROOT / SIZING, SMALL)
    s = scenario_at(q.scenario, q.search.demand.kind, q.search.demand.value, q.search.probe.num_requests)
    prompts = generate_workload(s.workload, s.max_model_len).prompt_tokens
    shapes = split_shapes(q, 1024)
    (short_share, short), (long_share, long) = shapes["short"], shapes["long"]
    assert short_share == pytest.approx(float(np.mean(prompts <= 1024)))
    assert short_share + long_share == pytest.approx(1.0)
    assert short.prompt_tokens == pytest.approx(float(prompts[prompts <= 1024].mean()))
    assert long.prompt_tokens == pytest.approx(float(prompts[prompts > 1024].mean()))


def test_no_unit_serves_more_than_its_bound():
    q = load_sizing(
        ROOT / SIZING,
        [*SMALL, "search.length_routed.thresholds_tokens=[1024]", "search.length_routed.ratios=[[1, 1], [1, 2]]"],
    )
    c = compare_topologies(q, None, workers=1, ray_address=None)
    shape, tpot = workload_shape(q), tightest(q.scenario.slo.tpot_ms)
    assert len(c.results) == 2
    for r in c.results:
        assert 0 < r.evaluation.capacity.load <= unit_bound(r.unit, shape, tpot, q.scenario.slo, "rate")
        detail = r.evaluation.detail
        assert 0 < detail["short_busy_share"] <= 1 and 0 < detail["long_busy_share"] <= 1


def test_the_command_weighs_them_and_says_how_to_serve_the_best():
    run = subprocess.run(
        [sys.executable, "-m", "planner.cli", "size", SIZING, *sets(*SMALL, "search.length_routed.thresholds_tokens=[4096]",
         "search.length_routed.ratios=[[2, 1]]")],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "Aggregated against length-routed (units of two pools, each behind its own router by prompt length):" in out
    assert "2S1L at 4,096 tokens: short l40s tp1, long h100-sxm tp1" in out
    assert "# behind a router that sends prompts up to 4,096 tokens to pool short, longer ones to pool long" in out
    data = json.loads(
        subprocess.run(
            [sys.executable, "-m", "planner.cli", "size", SIZING, "--json", *sets(*SMALL,
             "search.length_routed.thresholds_tokens=[4096]", "search.length_routed.ratios=[[2, 1]]")],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    (unit,) = data["disaggregated"]["units"]
    assert unit["kind"] == "length-routed" and unit["gpus"] == {"short": "l40s", "long": "h100-sxm"}


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("search.length_routed={short: {gpus: [l40s]}}", "search.length_routed.thresholds_tokens: missing"),
        ("search.length_routed={thresholds_tokens: [40000]}", "search.length_routed.thresholds_tokens[0] = 40000: must be below max_model_len (32,768)"),
        ("search.length_routed={thresholds_tokens: [0]}", "search.length_routed.thresholds_tokens[0] = 0:"),
        ("search.length_routed={thresholds_tokens: [1024], ratios: [[0, 1]]}", "search.length_routed.ratios[0] = [0, 1]: a list of [short replicas, long replicas] pairs"),
        ("search.length_routed={thresholds_tokens: [1024], long: {gpus: [h100]}}", 'search.length_routed.long.gpus[0] = "h100": unknown GPU'),
    ],
)  # fmt: skip
def test_bad_length_routed_input_is_one_clear_message_and_exit_2(item, expected):
    run = subprocess.run(
        [sys.executable, "-m", "planner.cli", "size", SIZING, "--set", item],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 2, run.stdout
    assert expected in run.stderr and "Traceback" not in run.stderr, run.stderr
