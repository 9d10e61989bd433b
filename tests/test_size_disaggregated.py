"""`planner size` weighs prefill/decode units (`search.disaggregated`) against the aggregated candidates: each unit is
the fleet a scenario file would describe, run by the fleet simulator through the same probes, sized and priced per
role; the report says which topology wins and gives the winning unit's serve lines."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest
import yaml
from helpers import ROOT

from planner.catalog import catalog_gpu
from planner.scenario.load import load_scenario
from planner.sizing.probe import run_probe
from planner.sizing.rank import rank
from planner.sizing.report.topology import topology_lines
from planner.sizing.search import run_search
from planner.sizing.spec import load_sizing
from planner.sizing.topology import compare_topologies, enumerate_units
from planner.sizing.unit_intervals import run_unit_intervals

BASE = "scenarios/a10_qwen7b.yaml"
# A short-prompt, closed-loop load on one H100 (the aggregated candidate) against a 1P1D and a 2P1D unit of H100s
# over NVLink: small probes, so the test runs in seconds.
UNITS = (
    "search.disaggregated={prefill: {gpus: [h100-sxm], tensor_parallel_sizes: [1]}, decode: {gpus: [h100-sxm],"
    " tensor_parallel_sizes: [1]}, ratios: [[1, 1], [2, 1]], kv_transfer: {link: nvlink, bandwidth_gbit_per_s: 3600}}"
)
SMALL = [
    "search.probe.num_requests=60",
    "search.probe.max_probes=5",
    "search.candidates.gpus=[h100-sxm]",
    "search.candidates.tensor_parallel_sizes=[1]",
    "search.demand={concurrency: 16, headroom: 1.2}",
]


def size(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "planner.cli", "size", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def sized():
    q = load_sizing(ROOT / BASE, [*SMALL, UNITS])
    out = run_search(q, workers=1)
    ranking = rank(out)
    # None: no aggregated cost to prune by, so every unit is simulated (the command prunes by the recommendation's)
    return q, ranking, compare_topologies(q, None, workers=1, ray_address=None)


def test_a_unit_is_the_fleet_a_scenario_file_describes_and_runs_the_same(tmp_path, sized):
    """The unit's scenario is what the scenario loader builds from the same fleet written as a file, and a probe of it
    is that fleet's simulation."""
    q, _, comparison = sized
    unit = comparison.results[1].unit  # 2P1D
    assert unit.label == "2P1D: prefill h100-sxm tp1, decode h100-sxm tp1"
    data = yaml.safe_load((ROOT / BASE).read_text())
    del data["hardware"]
    data["fleet"] = {
        "pools": {
            "prefill": {"role": "prefill", "hardware": {"gpu": "h100-sxm", "tensor_parallel_size": 1, "replicas": 2}},
            "decode": {"role": "decode", "hardware": {"gpu": "h100-sxm", "tensor_parallel_size": 1, "replicas": 1}},
        },
        "router": {"policy": "least_outstanding"},
        "kv_transfer": {"link": "nvlink", "bandwidth_gbit_per_s": 3600},
    }
    path = tmp_path / "a10_qwen7b.yaml"  # the same file name: the scenario's name is its stem
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    written = load_scenario(path)
    assert written.fleet == unit.scenario.fleet
    assert written.workload == unit.scenario.workload and written.engine == unit.scenario.engine
    ev = comparison.results[1].evaluation
    again = run_probe(written, "users", ev.capacity.load, q.search.probe.num_requests, unit.coefficients)
    nominal = next(p for p in ev.capacity.probes if p.load == ev.capacity.load)
    assert again.met and again.latency_ms == nominal.latency_ms and again.completed == nominal.completed


def test_units_are_sized_for_the_demand_and_priced_per_role(sized):
    q, _, comparison = sized
    d, money = q.search.demand, q.search.money
    assert [r.unit.label.split(":")[0] for r in comparison.results] == ["1P1D", "2P1D"]
    for r in comparison.results:
        ev = r.evaluation
        assert ev.capacity.load > 0
        assert ev.units == max(1, math.ceil(d.value * d.headroom / ev.capacity.load - 1e-9))
        gpus = ev.units * r.unit.num_gpus()
        assert r.unit.num_gpus() == sum(r.unit.replicas.values())  # tensor parallel 1 in both roles
        rent = catalog_gpu("h100-sxm").rental_usd_per_hour
        assert r.rental_usd_per_month == pytest.approx(gpus * rent * money.hours_per_month)
        # the unit at its share of the demand: a passing probe, and its fleet view names a pool
        assert ev.at_demand.load == math.ceil(d.value / ev.units) and ev.at_demand.met
        assert ev.detail["bottleneck_pool"] in ("prefill", "decode") and ev.detail["median_transfer_ms"] > 0
        above = [p for p in ev.capacity.probes if p.load > ev.capacity.load]
        assert all(not p.met for p in above)  # the capacity is the highest load that passed


def test_intervals_draw_the_best_units_seeds_and_pools_coefficients(sized):
    q, ranking, comparison = sized
    c = dataclasses.replace(comparison)  # the fixture's comparison stays without intervals
    run_unit_intervals(c, q, 3, workers=1)
    iv, best = c.intervals, c.best
    assert iv["label"] == best.unit.label and iv["runs"] == 3 and iv["seeds"] == [0, 2]
    assert iv["load"] == best.evaluation.at_demand.load and iv["at"] == "the demand's share"
    cap = iv["capacity_per_unit"]
    assert cap["low"] <= cap["median"] <= cap["high"] and cap["low"] > 0
    assert iv["units_needed"]["low"] <= iv["units_needed"]["high"]
    for name in ("prefill", "decode"):  # every pool's coefficients are drawn where its provenance has a std
        assert f"{name}: " in iv["varies"]
    lat = iv["latency_ms"]["p99_tpot"]
    assert lat["low"] <= lat["median"] <= lat["high"]
    assert c.interval_simulations >= 3 * 2  # a run at the load and at least one probe per draw
    again = dataclasses.replace(comparison)
    run_unit_intervals(again, q, 3, workers=2)
    assert again.intervals == iv  # drawn before any run: the same with any number of workers
    assert any(line.strip().startswith(f"90% intervals of {best.unit.label}") for line in
               topology_lines(c, ranking, q.search.demand.unit))  # fmt: skip


def test_short_prompts_at_light_load_are_cheaper_aggregated(sized):
    """15-token prompts: a prefill replica idles, so a unit costs at least two GPUs where one serves the load."""
    _, ranking, comparison = sized
    from planner.sizing.report.topology import verdict

    agg = ranking.recommended
    assert agg.evaluation.replicas * agg.candidate.tensor_parallel_size == 1
    assert comparison.best.objective_usd_per_month > agg.objective_usd_per_month
    text = verdict(comparison, ranking)
    assert text.startswith("aggregated wins by 50%: aggregated h100-sxm tp1")
    assert comparison.best.evaluation.detail["prefill_busy_share"] < 0.2


def test_the_command_prints_the_comparison_and_the_json_and_report_carry_it(tmp_path):
    """The command prunes by the aggregated recommendation's cost: one H100 ($1,825 a month) serves the load, and a
    unit of two H100s cannot cost less, so neither unit is simulated and the report says why."""
    done = size(BASE, *sets(*SMALL, UNITS), "--json", "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)["disaggregated"]
    assert data["best"] is None and data["units"] == [] and data["verdict"].startswith("aggregated wins: h100-sxm tp1")
    assert [c["label"].split(":")[0] for c in data["cannot_run"]] == ["1P1D", "2P1D"]
    assert all(c["reason"].startswith("cannot win: its cost floor $3,650 a month") for c in data["cannot_run"][:1])
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split("## Aggregated against disaggregated\n\n", 1)[1].split("## Figures", 1)[0]
    assert (
        section.startswith(data["verdict"])
        and "- 2P1D: prefill h100-sxm tp1, decode h100-sxm tp1: cannot run: cannot win" in section
    )
    assert "<h2>Aggregated against disaggregated</h2>" in (tmp_path / "report" / "report.html").read_text()
    manifest = yaml.safe_load((tmp_path / "report" / "llm-d-values.yaml").read_text())
    assert manifest["prefill"] == {"create": False} and manifest["decode"]["replicas"] == 1  # the aggregated H100
    done = size(BASE, *sets(*SMALL, UNITS))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "Aggregated against disaggregated (prefill/decode units, each behind its own proxy):" in lines
    assert any(line.startswith("Topology: aggregated wins: h100-sxm tp1") for line in lines)


def test_units_that_can_win_are_simulated_and_carry_serve_lines_in_the_json():
    """Against one H200 ($3.50 an hour), a 1P1D unit of an L4 ($0.80) and an H100 ($2.50) can cost less: it is
    simulated, and carries its serve lines with the KV connector."""
    unit_of = UNITS.replace("prefill: {gpus: [h100-sxm]", "prefill: {gpus: [l4]").replace(
        "[[1, 1], [2, 1]]", "[[1, 1]]"
    )
    small = [s.replace("gpus=[h100-sxm]", "gpus=[h200]") for s in SMALL]
    done = size(BASE, *sets(*small, unit_of), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)["disaggregated"]
    (unit,) = data["units"]
    assert unit["label"] == "1P1D: prefill l4 tp1, decode h100-sxm tp1" and unit["capacity_per_unit"] > 0
    assert sum("--kv-transfer-config" in line for line in unit["vllm_serve"]) == 2
    assert data["best"] == unit["label"] and data["verdict"].startswith("disaggregated wins by")


def test_a_length_of_units_beyond_what_fits_is_pruned_with_the_memory_models_reason():
    q = load_sizing(
        ROOT / "scenarios/size_h100_llama31_70b_pd.yaml",
        ["search.disaggregated.prefill.tensor_parallel_sizes=[1, 4]", "search.disaggregated.ratios=[[1, 1]]"],
    )
    units, pruned = enumerate_units(q)
    assert [u.label for u in units] == ["1P1D: prefill h100-sxm tp4, decode h100-sxm tp4"]
    assert pruned[0][0] == "1P1D: prefill h100-sxm tp1, decode h100-sxm tp4" and "prefill does not fit" in pruned[0][1]


def test_each_role_sweeps_its_own_engine_settings_over_the_scenarios():
    roles = (
        "search.disaggregated={prefill: {gpus: [h100-sxm], tensor_parallel_sizes: [1], engine: {max_num_batched_tokens:"
        " [2048, 8192]}}, decode: {gpus: [h100-sxm], tensor_parallel_sizes: [1], engine: {max_num_seqs: [8, 64, 8]}},"
        " ratios: [[1, 1]], kv_transfer: {link: nvlink, bandwidth_gbit_per_s: 3600}}"
    )
    q = load_sizing(ROOT / BASE, [*SMALL, roles])
    units, pruned = enumerate_units(q)
    assert not pruned
    assert [u.label for u in units] == [
        f"1P1D: prefill h100-sxm tp1 (tokens {tokens}), decode h100-sxm tp1 (seqs {seqs})"
        for tokens in (2048, 8192)
        for seqs in (8, 64)  # 8 given twice: one setting
    ]
    last = units[-1].scenario
    prefill, decode = (last.pool_scenario(p) for p in last.fleet.pools)
    assert (prefill.engine.max_num_batched_tokens, decode.engine.max_num_seqs) == (8192, 64)
    # what a role does not sweep is the scenario's
    assert prefill.engine.max_num_seqs == q.scenario.engine.max_num_seqs != 64
    assert decode.engine.max_model_len == prefill.engine.max_model_len == q.scenario.max_model_len


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("search.disaggregated={}", "search.disaggregated.kv_transfer: missing"),
        (
            "search.disaggregated={kv_transfer: {link: infiniband}}",
            "search.disaggregated.kv_transfer.bandwidth_gbit_per_s: missing",
        ),
        (
            "search.disaggregated={ratios: [[1, 0]], kv_transfer: {link: nvlink, bandwidth_gbit_per_s: 3600}}",
            "search.disaggregated.ratios[0] = [1, 0]: a list of [prefill replicas, decode replicas] pairs",
        ),
        (
            "search.disaggregated={ratio: [[1, 1]], kv_transfer: {link: nvlink, bandwidth_gbit_per_s: 3600}}",
            "search.disaggregated.ratio: unknown key (did you mean ratios?)",
        ),
        (
            "search.disaggregated={decode: {gpus: [h100]}, kv_transfer: {link: nvlink, bandwidth_gbit_per_s: 3600}}",
            'search.disaggregated.decode.gpus[0] = "h100": unknown GPU',
        ),
        (
            (
                "search.disaggregated={decode: {gpus: [{name: mine, memory_bytes: 80000000000, bf16_tflops: 300,"
                " memory_bandwidth_gbps: 2000}]}, kv_transfer: {link: nvlink, bandwidth_gbit_per_s: 3600}}"
            ),
            'search.disaggregated.decode.gpus[0] = "mine": has no rental price',
        ),
        (
            (
                "search.disaggregated={prefill: {gpus: [a10, l4, l40s, a100-80gb, h100-sxm], tensor_parallel_sizes:"
                " [1, 2, 4, 8]}, decode: {gpus: [a10, l4, l40s, a100-80gb], tensor_parallel_sizes: [1, 2, 4]},"
                " kv_transfer: {link: nvlink, bandwidth_gbit_per_s: 3600}}"
            ),
            "1,200 prefill/decode units (GPUs x sizes x engine settings per role x ratios): at most 256",
        ),
        (
            (
                "search.disaggregated={decode: {engine: {max_num_seqs: [64, 0]}}, kv_transfer: {link: nvlink,"
                " bandwidth_gbit_per_s: 3600}}"
            ),
            "search.disaggregated.decode.engine.max_num_seqs[1] = 0:",
        ),
        (
            (
                "search.disaggregated={prefill: {engine: {max_num_seq: [64]}}, kv_transfer: {link: nvlink,"
                " bandwidth_gbit_per_s: 3600}}"
            ),
            "search.disaggregated.prefill.engine.max_num_seq: unknown key (did you mean max_num_seqs?)",
        ),
    ],
)
def test_bad_disaggregated_input_is_one_clear_message_and_exit_2(override, expected):
    done = size(BASE, "--set", override)
    assert done.returncode == 2, done.stdout
    assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"planner: error: {BASE}")


def test_the_manifest_is_llm_d_chart_values_for_the_units_or_the_replicas(sized, tmp_path):
    """llm-d-values.yaml: the recommendation in the layout of llm-d-modelservice's examples/values-pd.yaml: the chart
    sets the model and the tensor parallel size, every other flag of the serve line is in `args`."""
    from planner.sizing.llmd_values import llmd_values

    _, ranking, comparison = sized
    unit = comparison.results[1].unit  # 2P1D
    values = yaml.safe_load(llmd_values(None, 0, unit.scenario, 3))
    assert (
        values["modelArtifacts"]["name"] == "Qwen/Qwen-7B-Chat" and values["routing"]["proxy"]["connector"] == "nixlv2"
    )
    assert (values["prefill"]["replicas"], values["decode"]["replicas"]) == (6, 3)
    for role in ("prefill", "decode"):
        (container,) = values[role]["containers"]
        args = container["args"]
        assert container["modelCommand"] == "vllmServe" and values[role]["parallelism"]["tensor"] == 1
        assert "--tensor-parallel-size" not in args and "Qwen/Qwen-7B-Chat" not in args
        assert args[args.index("--kv-transfer-config") + 1] == '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    mooncake = dataclasses.replace(
        unit.scenario,
        fleet=dataclasses.replace(
            unit.scenario.fleet,
            kv_transfer=dataclasses.replace(unit.scenario.fleet.kv_transfer, connector="MooncakeConnector"),
        ),
    )
    assert llmd_values(None, 0, mooncake, 3) is None  # the chart's sidecar drives NixlConnector's flow only
    agg = ranking.recommended
    values = yaml.safe_load(llmd_values(agg.candidate.scenario, agg.evaluation.replicas))
    assert values["prefill"] == {"create": False} and values["decode"]["replicas"] == agg.evaluation.replicas
    assert "--kv-transfer-config" not in values["decode"]["containers"][0]["args"]
