"""`planner size` on bad input: one clear message (file, field, value, what is allowed), exit 2, no traceback;
nothing asked for silently dropped or replaced by a default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.sizing import probe_result

from planner.cli import main
from planner.sizing import cli as size_cli
from planner.sizing.candidates import enumerate_candidates
from planner.sizing.capacity import find_capacity
from planner.sizing.report import files
from planner.sizing.spec import load_sizing
from planner.sizing.spec_checks import probe_request_counts

# One GPU, one tensor parallel size, 20-request probes: a search of a few simulations of ~10 ms.
SIZING = """\
model: qwen-7b
hardware: {gpu: a10}
engine: {max_model_len: 4096}
workload: {num_requests: 20, arrival: {process: closed, concurrency: 4}, prompt_tokens: {dist: fixed, value: 15},
           output_tokens: {dist: fixed, value: 20}}
slo: {tpot_ms: {p99: 100}, e2el_ms: {p99: 10000}}
search: {demand: {concurrency: 4}, candidates: {gpus: [a10], tensor_parallel_sizes: [1]},
         probe: {num_requests: 20, max_probes: 2}}
"""


@pytest.fixture
def sizing_file(tmp_path) -> Path:
    path = tmp_path / "sz.yaml"
    path.write_text(SIZING)
    return path


def size_error(capsys, *args: str) -> str:
    """`planner size ...` that must fail as a user error: its one-line message."""
    assert main(["size", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("planner: error: ") and "Traceback" not in err and err.count("\n") == 1
    return err


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture
def no_search(monkeypatch):
    """The input is refused before the search: running it fails the test."""

    def search(*_args, **_kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr(size_cli, "run_search", search)


# 1, 2: a max_model_len no request fits under


def test_a_max_model_len_no_request_fits_under_is_refused_before_the_search(capsys, sizing_file, no_search):
    err = size_error(capsys, str(sizing_file), "--workers", "1", *sets("engine.max_model_len=30"))
    assert f"{sizing_file}: engine.max_model_len = 30: all 20 requests of a probe" in err
    assert "raise it or set workload.too_long: truncate" in err


def test_a_swept_max_model_len_no_request_fits_under_prunes_its_candidates(sizing_file):
    q = load_sizing(sizing_file, ["search.candidates.engine={max_model_len: [1, 4096]}"])
    kept, pruned = enumerate_candidates(q)
    assert [c.label for c in kept] == ["a10 tp1, len 4096"]
    assert [p.label for p in pruned] == ["a10 tp1, len 1"]
    assert pruned[0].reason == (
        "max_model_len 1 rejects 20 of a probe's 20 requests that engine.max_model_len 4096 keeps (prompt + output"
        " tokens longer): it does not serve this workload"
    )


def test_a_sweep_whose_every_max_model_len_rejects_every_request_cannot_run(capsys, sizing_file):
    err = size_error(capsys, str(sizing_file), "--workers", "1", *sets("search.candidates.engine={max_model_len: [1]}"))
    assert "no candidate can run" in err and "max_model_len 1 rejects 20 of a probe's 20 requests" in err
    assert "\\n" not in err  # the candidates' reasons were joined by newlines, which the CLI printed escaped


# A swept max_model_len shorter than some requests: it would drop (or cut) the longest ones and size a lighter
# workload than the one asked about. It once won: 3 A10s where the workload needs 17 (planner size on uniform
# 100-3,000-token prompts swept over max_model_len [1024, 4096]).

UNEVEN = {
    "workload.prompt_tokens": "{dist: uniform, low: 10, high: 200}",
    "search.candidates.engine": "{max_model_len: [64, 128, 256, 4096]}",
}


@pytest.mark.parametrize("too_long", ["reject", "truncate"])
def test_a_swept_max_model_len_that_drops_or_cuts_requests_the_scenarios_keeps_is_pruned(sizing_file, too_long):
    q = load_sizing(sizing_file, [*sets_of(UNEVEN), f"workload.too_long={too_long}"])
    kept, pruned = enumerate_candidates(q)
    assert [c.label for c in kept] == ["a10 tp1, len 256", "a10 tp1, len 4096"]  # every request fits in 220 tokens
    assert [p.label for p in pruned] == ["a10 tp1, len 64", "a10 tp1, len 128"]
    verb = {"reject": "rejects", "truncate": "truncates"}[too_long]
    assert all(f"{verb} " in p.reason and "it does not serve this workload" in p.reason for p in pruned)


def test_a_swept_max_model_len_as_long_as_the_scenarios_own_is_kept_when_that_one_drops_requests(sizing_file):
    # The scenario's own max_model_len 128 rejects the longest requests: the workload asked about is the rest,
    # which 128 and anything longer serve.
    q = load_sizing(sizing_file, [*sets_of(UNEVEN), "engine.max_model_len=128"])
    kept, pruned = enumerate_candidates(q)
    assert [c.label for c in kept] == ["a10 tp1, len 128", "a10 tp1, len 256", "a10 tp1, len 4096"]
    assert [p.label for p in pruned] == ["a10 tp1, len 64"]
    assert "rejects" in pruned[0].reason and "that engine.max_model_len 128 keeps" in pruned[0].reason


def sets_of(items: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in items.items()]


# 3: --out checked before the search, and a write that fails named


def test_an_out_that_is_a_file_is_refused_before_the_search(capsys, sizing_file, tmp_path, no_search):
    taken = tmp_path / "taken"
    taken.write_text("")
    assert f"--out {taken}: exists and is not a folder" in size_error(capsys, str(sizing_file), "--out", str(taken))


def test_an_out_whose_report_name_is_a_folder_is_refused_before_the_search(capsys, sizing_file, tmp_path, no_search):
    (tmp_path / "out" / "report.md").mkdir(parents=True)
    err = size_error(capsys, str(sizing_file), "--out", str(tmp_path / "out"))
    assert f"--out {tmp_path / 'out'}: report.md exists and is not a file" in err


def test_an_out_that_cannot_be_created_is_refused_before_the_search(capsys, sizing_file, tmp_path, no_search):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "out"  # under a file: no folder can be made there
    assert f"--out {out}: cannot create the folder" in size_error(capsys, str(sizing_file), "--out", str(out))


def test_a_report_file_that_cannot_be_written_after_the_search_names_it(capsys, sizing_file, tmp_path, monkeypatch):
    monkeypatch.setattr(files, "check_report_dir", lambda out: None, raising=False)  # it passed, then...
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "out"  # ...the folder went: nothing can be written there
    err = size_error(capsys, str(sizing_file), "--workers", "1", "--out", str(out))
    assert f"--out {out}: cannot write latency_vs_load.png: Not a directory" in err


# 4: bounds, the scenario's own for the same quantities


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "search.candidates.tensor_parallel_sizes=[1000000000000]",
            "search.candidates.tensor_parallel_sizes[0] = 1000000000000: must be in [1, 64]",
        ),
        (
            "search.candidates.replicas=[2, 1000000000000]",
            "search.candidates.replicas[1] = 1000000000000: must be in [1, 1,024]",
        ),
        ("search.candidates.replicas=[0]", "search.candidates.replicas[0] = 0: must be in [1, 1,024]"),
        (
            "search.probe.num_requests=100000000000",
            "search.probe.num_requests = 100000000000: must be in [20, 10,000,000]",
        ),
        ("search.probe.max_probes=1000000000", "search.probe.max_probes = 1000000000: must be in [2, 64]"),
    ],
)
def test_search_values_beyond_their_bounds_are_refused(capsys, sizing_file, no_search, override, expected):
    assert f"{sizing_file}: {expected}" in size_error(capsys, str(sizing_file), *sets(override))


def test_workers_beyond_a_few_per_cpu_are_refused(capsys, sizing_file, no_search):
    err = size_error(capsys, str(sizing_file), "--workers", "100000")
    assert f"--workers 100000: must be in [1, {size_cli.max_workers():,}]" in err and "per CPU" in err


def test_intervals_beyond_the_bound_are_refused(capsys, sizing_file, no_search):
    err = size_error(capsys, str(sizing_file), "--intervals", "100000000000")
    assert "--intervals 100000000000: must be a number of runs in [2, 1,000]" in err


def test_a_sweep_of_millions_of_candidates_is_refused_before_it_is_built(capsys, sizing_file, no_search):
    """Each candidate is a scenario in memory: 1.2 million of them grew the process for minutes, silently."""
    seqs, tokens = (", ".join(map(str, values)) for values in (range(1, 257), range(4096, 4296)))
    sweep = f"search.candidates.engine={{max_num_seqs: [{seqs}], max_num_batched_tokens: [{tokens}]}}"
    err = size_error(capsys, str(sizing_file), *sets(sweep))
    expected = "search.candidates: 51,200 combinations (256 engine.max_num_seqs x 200 engine.max_num_batched_tokens)"
    assert f"{sizing_file}: {expected}: at most 10,000; sweep fewer values" in err


def test_a_value_swept_twice_is_one_candidate(sizing_file):
    question = load_sizing(sizing_file, ["search.candidates.engine={max_num_seqs: [32, 32, 64, 32]}"])
    assert question.search.engine["max_num_seqs"] == (32, 64)


# 5: a search section that is not a mapping is refused, not replaced by its defaults


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("search.candidates=[]", "search.candidates = []: expected a mapping with keys gpus, tensor_parallel_sizes"),
        ("search.demand=0", "search.demand = 0: expected a mapping with keys rate, concurrency, headroom"),
        ("search.candidates.engine=[]", "search.candidates.engine = []: expected a mapping with keys scheduler"),
        ("search.probe=false", "search.probe = false: expected a mapping with keys num_requests, max_probes"),
        ("search.money=[]", "search.money = []: expected a mapping with keys objective"),
    ],
)
def test_a_search_section_that_is_not_a_mapping_is_refused(capsys, sizing_file, no_search, override, expected):
    assert f"{sizing_file}: {expected}" in size_error(capsys, str(sizing_file), *sets(override))


def test_an_absent_search_section_means_its_defaults(sizing_file):
    q = load_sizing(sizing_file, ["search={demand: {concurrency: 4}, candidates: {gpus: [a10]}}"])
    assert (q.search.probe.num_requests, q.search.probe.max_probes) == (1000, 8)
    assert q.search.tensor_parallel_sizes == (1, 2, 4, 8) and q.search.engine == {}


# 6: a search whose probes ran out is not reported as failing at the lightest load


def test_a_capacity_search_that_runs_out_of_probes_before_its_lightest_load_says_so():
    short = find_capacity(lambda x: probe_result(x, x <= 0.1), "rate", 10.0, None, 2, 0.1)
    assert short.load == 0 and short.ran_out and short.lightest.load == 5.0
    full = find_capacity(lambda x: probe_result(x, False), "rate", 10.0, None, 12, 0.1)
    assert full.load == 0 and not full.ran_out  # it reached its floor: the SLOs fail at the lightest load


def test_a_search_out_of_probes_tells_to_raise_max_probes(capsys, sizing_file):
    heavy = sets(
        "search.demand={rate: 2.4}", "workload.prompt_tokens.value=1500", "workload.output_tokens.value=200",
        "search.probe.num_requests=100", "slo.tpot_ms={p99: 40}",
    )  # fmt: skip
    assert main(["size", str(sizing_file), "--workers", "1", *heavy]) == 2
    out = capsys.readouterr().out  # the report; the error on stderr says no candidate meets the SLOs
    assert "search.probe.max_probes = 2 ran out before a lighter load; raise it" in out
    assert "even at the lightest load" not in out


def test_a_closed_loop_probe_sends_every_user_several_requests(sizing_file):
    """With no more requests than users every request is sent at t=0 and none waits for a reply: probes at
    1,024 and 1,933 users gave the same TTFT, and a recommendation missed its own SLOs."""
    from planner.sizing.probe import MIN_REQUESTS_PER_USER, run_probe, scenario_at
    from sim.cost_coefficients import CostCoefficients

    base = load_sizing(sizing_file, ["engine.max_num_seqs=8"]).scenario
    assert scenario_at(base, "users", 100, 20).workload.num_requests == MIN_REQUESTS_PER_USER * 100
    assert scenario_at(base, "users", 3, 20).workload.num_requests == 20
    ttft = [
        run_probe(base, "users", users, 20, CostCoefficients(), stop_early=False).latency_ms["p99_ttft"]
        for users in (40, 80)
    ]
    assert ttft[1] > 1.5 * ttft[0]  # twice the users queue twice as long for the same 8 rows


@pytest.mark.parametrize("too_long", ["reject", "truncate"])
def test_requests_the_scenarios_own_max_model_len_drops_or_cuts_are_said_in_the_answer(capsys, sizing_file, too_long):
    # "serving 4 users" alone was false when half of them were refused as too long.
    overrides = [*sets_of(UNEVEN), "engine.max_model_len=128", f"workload.too_long={too_long}"]
    overrides.remove("search.candidates.engine={max_model_len: [64, 128, 256, 4096]}")
    assert main(["size", str(sizing_file), "--workers", "1", "--json", *sets(*overrides)]) == 0
    data = json.loads(capsys.readouterr().out)
    q = load_sizing(sizing_file, overrides)
    kept, truncated = probe_request_counts(q.scenario, q.search.probe, 128)
    cut = 20 - kept if too_long == "reject" else truncated
    assert 0 < cut < 20
    share = f"{cut / 20:.0%}"
    said = {
        "reject": f"less the {share} longer than max_model_len 128",
        "truncate": f"the {share} longer than max_model_len 128 truncated",
    }[too_long]
    assert f"serving 4 users ({said})" in data["answer"]
    assert data["too_long"].startswith(
        f"{share} of the requests ({cut} of a probe's 20) are longer than engine.max_model_len 128"
    )


def test_nothing_is_said_of_too_long_requests_when_every_request_fits(capsys, sizing_file):
    assert main(["size", str(sizing_file), "--workers", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["too_long"] is None and "longer than" not in data["answer"]


def test_a_kv_pool_override_is_refused_in_a_search_over_other_gpus(capsys, sizing_file, no_search):
    # Every candidate, on any GPU, would have run with the one pool it sets (300 blocks on an H100 as on an A10).
    other = sets("engine.num_gpu_blocks_override=300", "search.candidates.gpus=[a10, h100-sxm]")
    err = size_error(capsys, str(sizing_file), *other)
    assert f"{sizing_file}: engine.num_gpu_blocks_override = 300: a block count for the memory of a10 at" in err
    load_sizing(sizing_file, ["engine.num_gpu_blocks_override=300"])  # the search is over the scenario's own a10 tp1


@pytest.mark.parametrize("bounds", ["{tpot_ms: {p99: 100}}", "{}", "{itl_ms: {p99: 100}}"])
def test_a_demand_in_users_without_a_wait_bound_is_refused(capsys, sizing_file, no_search, bounds):
    # TPOT (or ITL) alone held at any number of users: they only queue longer (11,136 users per A10, once).
    err = size_error(capsys, str(sizing_file), *sets(f"slo={bounds}"))
    assert f"{sizing_file}: slo: a demand in users (search.demand.concurrency) needs a TTFT or E2E bound" in err


# A fuzzing round's finds: a demand the scenarios cannot run, a GPU priced at $0


@pytest.mark.parametrize(
    ("demand", "words"),
    [
        ("{concurrency: 1000000000000}", "search.demand.concurrency = 1000000000000: must be in [1, 100,000] users"),
        ("{rate: 1e300}", "search.demand.rate = 1e+300: must be in [1e-06, 1e+06] requests/s"),
        ("{concurrency: 4, headroom: 1e9}", "search.demand.headroom = 1000000000.0: must be in [1, 100]"),
        (
            "{concurrency: 90000, headroom: 1.2}",
            (
                "search.demand.headroom = 1.2: sizes for 108,000 users (90,000 from search.demand.concurrency), and a"
                " scenario's workload.arrival.concurrency must be in [1, 100,000]"
            ),
        ),
    ],
)
def test_a_demand_beyond_what_a_scenario_may_run_is_refused(capsys, sizing_file, no_search, demand, words):
    # 10^12 users allocated 29 TiB and 10^300 req/s answered with a 300-digit replica count.
    assert words in size_error(capsys, str(sizing_file), *sets(f"search.demand={demand}"))


def test_a_gpu_priced_at_nothing_can_win(capsys, sizing_file):
    # The runner-ups' "+N%" divided by the winner's $0 (a GPU already owned).
    two_gpus = "search.candidates={gpus: [a10, l4], tensor_parallel_sizes: [1]}"
    args = [str(sizing_file), *sets(two_gpus, "search.money.rental_usd_per_gpu_hour={a10: 0}")]
    assert main(["size", *args]) == 0
    out = capsys.readouterr().out
    assert "Answer: Rent 1 replica of a10 tp1" in out and "$0/month" in out
    assert "(the best costs nothing)" in out


@pytest.mark.parametrize(
    ("money", "words"),
    [
        (
            "search.money.rental_usd_per_gpu_hour={a10: 1.0e308}",
            "search.money.rental_usd_per_gpu_hour.a10 = 1e+308: must be a number of USD in [0, 10,000]",
        ),
        (
            "search.money.purchase_usd_per_gpu={a10: 1.0e9}",
            "search.money.purchase_usd_per_gpu.a10 = 1000000000.0: must be a number of USD in [0, 100,000,000]",
        ),
        ("search.money.amortization_months=1.0e-300", "search.money.amortization_months = 1e-300: must be in [1, 600]"),
    ],
)
def test_a_price_beyond_the_catalogs_bounds_is_refused(capsys, sizing_file, no_search, money, words):
    # 1e308 $/h answered "$inf/month" (and null in --json); the catalog caps an inline GPU's prices the same way.
    assert words in size_error(capsys, str(sizing_file), *sets(money))
