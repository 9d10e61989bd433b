"""`planner size`: the sizing file's validation, pruning, the report, and bad input (the capacity search and its
bound: tests/test_size_capacity.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest
from helpers import ROOT, needs
from helpers.browser import chromium, inspect_pages
from helpers.sizing import probe_result

from planner.cli import main
from planner.sizing.rank import rank
from planner.sizing.search import run_search
from planner.sizing.spec import load_sizing

BASE = "scenarios/a10_qwen7b.yaml"
SMALL = ["search.probe.num_requests=40", "search.probe.max_probes=4"]


def size(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "planner.cli", "size", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def test_a_plain_scenario_is_a_sizing_question_over_the_catalog():
    q = load_sizing(ROOT / BASE)
    assert q.search.demand.kind == "users" and q.search.demand.value == 20
    names = [g.name for g in q.search.gpus]
    assert "a10" in names and "h100-sxm" in names and "cpu" not in names
    assert q.search.tensor_parallel_sizes == (1, 2, 4, 8) and q.search.money.objective == "rental"


def test_search_prunes_what_cannot_run_and_what_cannot_win():
    q = load_sizing(
        ROOT / BASE,
        [
            *SMALL,
            "search.candidates.gpus=[a10, l40s]",
            "search.candidates.tensor_parallel_sizes=[1, 2, 3, 4]",
            "search.candidates.engine.max_num_seqs=[32, 64, 128, 256]",
        ],
    )
    out = run_search(q, workers=1)
    reasons = {p.label: p.reason for p in out.pruned}
    assert "tensor_parallel_size = 3" in reasons["a10 tp3, seqs 32"] and "must divide" in reasons["a10 tp3, seqs 32"]
    skipped = [r for r in out.results if r.evaluation is None]
    assert skipped and all("not simulated" in r.note for r in skipped)
    ranking = rank(out)
    assert ranking.recommended is not None and ranking.recommended.meets
    # an empty profile folder: the shipped public calibrations, the A10's transferred from the profiled GPUs
    assert all(r.candidate.provenance.startswith("transferred (from public profiles") for r in out.results)


def test_same_answer_with_one_or_two_workers():
    overrides = [*SMALL, "search.candidates.gpus=[a10, l40s]", "search.candidates.tensor_parallel_sizes=[1, 2]"]
    runs = [run_search(load_sizing(ROOT / BASE, overrides), workers=w) for w in (1, 2)]
    caps = [[(r.candidate.label, r.evaluation and r.evaluation.capacity.load, r.note) for r in o.results] for o in runs]
    assert caps[0] == caps[1]


def test_size_writes_a_self_contained_report(tmp_path):
    args = sets(*SMALL, "search.candidates.gpus=[a10, l4]", "search.candidates.tensor_parallel_sizes=[1, 2]")
    done = size(BASE, *args, "--workers", "1", "--out", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["recommended"] and data["answer"].startswith("Rent")
    best = next(c for c in data["candidates"] if c["label"] == data["recommended"])
    assert "--tensor-parallel-size" in best["vllm_serve"] and "--max-num-seqs" in best["vllm_serve"]
    assert best["costs"]["rental_usd_per_month"] > 0 and best["replicas"] >= 1
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    assert "src='http" not in page and "href=" not in page  # nothing to fetch: readable offline
    md = (tmp_path / "report.md").read_text()
    assert (
        "## Candidates" in md
        and "vllm serve" in md
        and "transferred (from public profiles" in md
        and "Produced by `planner size" in md
    )


def test_a_demand_no_candidate_meets_says_how_close_and_exits_2(tmp_path):
    args = sets(*SMALL, "search.candidates.gpus=[a10, l4]", "search.candidates.tensor_parallel_sizes=[1]",
                "slo.tpot_ms={p99: 5}")  # fmt: skip
    done = size(BASE, *args, "--workers", "1", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "no candidate meets the SLOs" in done.stderr and "Traceback" not in done.stderr
    assert "physics floor" in done.stdout  # what would be needed
    for gpu in ("a10", "l4"):  # per GPU: the setup that came closest, and how much looser the bounds must be
        line = next(x for x in done.stdout.splitlines() if x.startswith(f"  {gpu}: no setup tried meets"))
        assert f"closest: {gpu} tp1" in line and "x looser" in line
    md = (tmp_path / "report.md").read_text()
    assert "the closest is" in md and "what it would take" in md


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("search.demand.rat=3", "search.demand.rat: unknown key (did you mean rate?)"),
        ("serach.demand.rate=3", "serach: unknown key (did you mean search?)"),
        ("search.candidates.gpus=[]", "search.candidates.gpus = []: is empty"),
        ("search.candidates.gpus=[a100]", 'search.candidates.gpus[0] = "a100": unknown GPU'),
        ("search.money.objective=rent", 'search.money.objective = "rent": must be one of rental, purchase, both'),
        (
            "search.candidates.engine.max_num_seqs=[64, 0]",
            "search.candidates.engine.max_num_seqs[1] = 0: must be in [1, 65,536]",
        ),
        ("search.candidates.dtypes=[fp8]", "fp8/int8/int4 weights are not priced"),
        (
            "search.money.rental_usd_per_gpu_hour={a100: 1}",
            "search.money.rental_usd_per_gpu_hour.a100: is not a candidate",
        ),
        (
            "search.candidates.gpus=[{name: mine, memory_bytes: 80000000000, bf16_tflops: 300, memory_bandwidth_gbps: 2000}]",
            "has no rental price and objective rental needs one",
        ),
        ("search.candidates.gpus=[a10g]\n", None),  # placeholder replaced below
    ][:-1],
)
def test_bad_sizing_input_is_one_clear_message_and_exit_2(override, expected):
    done = size(BASE, "--set", override)
    assert done.returncode == 2, done.stdout
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"planner: error: {BASE}")


def test_purchase_objective_needs_a_purchase_price():
    done = size(BASE, *sets("search.money.objective=purchase", "search.candidates.gpus=[a10g]"))
    assert done.returncode == 2 and "a10g" in done.stderr and "no purchase price" in done.stderr


def test_every_candidate_unable_to_run_is_an_error_listing_why():
    done = size(
        BASE, *sets("model=llama-2-70b", "search.candidates.gpus=[a10]", "search.candidates.tensor_parallel_sizes=[1]")
    )
    assert done.returncode == 2 and "no candidate can run" in done.stderr and "a10 tp1: does not fit" in done.stderr


def test_validate_accepts_a_sizing_file():
    assert main(["validate", "scenarios/size_a10_qwen7b.yaml"]) == 0


TIMINGS = {"wall_s", "cpu_s", "median_simulation_s", "workers", "backend"}


def without_timings(value):
    """A sizing JSON without what depends on the machine and the executor (wall and CPU seconds, workers)."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def test_planner_size_on_a_local_ray_cluster_answers_as_the_local_search(tmp_path):
    """`planner size --ray ADDRESS` on a Ray cluster of this machine (2 worker CPUs), started here and stopped
    after: the same JSON, figure for figure, as the search in one process."""
    needs(importlib.util.find_spec("ray") is not None, "ray (the ray extra: pip install -e '.[ray]')")
    import ray

    args = [BASE, *sets(*SMALL, "search.candidates.gpus=[a10, l4]", "search.candidates.tensor_parallel_sizes=[1, 2]")]
    local = size(*args, "--workers", "1", "--json")
    assert local.returncode == 0, local.stderr
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.cluster_resources()["CPU"] >= 2
        address = ray.get_runtime_context().gcs_address  # host:port, as a user's `ray start --head` prints
        on_ray = size(*args, "--ray", address, "--json")
    finally:
        ray.shutdown()
    assert on_ray.returncode == 0, on_ray.stderr
    answer, expected = json.loads(on_ray.stdout), json.loads(local.stdout)
    assert answer["backend"] == "ray" and expected["backend"] == "processes"
    assert len(expected["candidates"]) >= 2 and expected["num_simulations"] >= 4  # work for both workers
    assert without_timings(answer) == without_timings(expected)


def test_the_recommendation_is_on_the_pareto_front():
    q = load_sizing(ROOT / BASE, [*SMALL, "search.candidates.gpus=[l40s]", "search.candidates.tensor_parallel_sizes=[1]",
                                  "search.candidates.engine.max_num_seqs=[16, 64]"])  # fmt: skip
    ranking = rank(run_search(q, workers=1))
    assert ranking.recommended in ranking.front


def test_a_ray_address_nothing_answers_on_is_one_clear_message():
    done = size(BASE, *sets("search.candidates.gpus=[a10]"), "--ray", "127.0.0.1:1")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--ray" in done.stderr  # no cluster there, or no ray extra installed


# ---------------------------------------------------------------------------------------------------------
# --intervals N

IV = [*SMALL, "search.candidates.gpus=[a10, l40s]", "search.candidates.tensor_parallel_sizes=[1, 2]"]


def _sized(overrides):
    out = run_search(load_sizing(ROOT / BASE, overrides), workers=1)
    return out, rank(out)


def test_a_draw_with_the_nominal_seed_and_coefficients_reproduces_the_nominal_figures():
    from planner.sizing.intervals import DrawTask, evaluate_draw
    from planner.sizing.search import e2e_bound_ms, tightest, workload_shape

    out, ranking = _sized(IV)
    r = ranking.recommended
    q, c, ev = out.question, r.candidate, r.evaluation
    shape = workload_shape(q)
    task = DrawTask(c, "users", ev.at_demand.load, q.scenario.workload.seed, c.coefficients, q.search.probe,
                    ev.capacity.load, shape, tightest(q.scenario.slo.tpot_ms), e2e_bound_ms(q.scenario.slo, shape))  # fmt: skip
    draw = evaluate_draw(task)
    assert draw.at_load.latency_ms == ev.at_demand.latency_ms and draw.at_load.met
    # the nominal capacity passes again; the search from it stops within one tolerance step (users: one more)
    assert (
        ev.capacity.load
        <= draw.capacity
        <= max(ev.capacity.load * (1 + q.search.probe.tolerance), ev.capacity.load + 1)
    )


def test_intervals_for_the_recommendation_and_runner_ups_are_ordered_and_the_same_with_any_workers():
    from planner.sizing.intervals import run_intervals

    runs = []
    for workers in (1, 2):
        out, ranking = _sized(IV)
        run_intervals(out, ranking, 3, workers=workers)
        runs.append(out)
    out = runs[0]
    picks = out.interval_picks
    assert picks[0] is rank(out).recommended and len(picks) >= 2  # with the runner-up of the other GPU
    for r in picks:
        iv = r.intervals
        assert iv["runs"] == 3 and iv["seeds"] == [0, 2] and iv["provenance_kind"] == "transferred"
        assert iv["coefficients_drawn"] and "leave-one-GPU-out" in iv["varies"]
        for v in [*iv["latency_ms"].values(), iv["capacity_per_replica"]]:
            assert v["low"] <= v["median"] <= v["high"]
        assert all(0 <= s["probability_met"] <= 1 for s in iv["slo"]) and 0 <= iv["probability_all_met"] <= 1
        assert iv["num_simulations"] >= 3 * 2  # per draw: the run at the demand and at least one capacity probe
    assert [r.intervals for r in runs[0].interval_picks] == [r.intervals for r in runs[1].interval_picks]


def test_coefficients_without_uncertainty_vary_the_seeds_only_and_say_so():
    import dataclasses

    from planner.sizing.intervals import run_intervals
    from planner.sizing.report.interval_tables import interval_notes

    out, ranking = _sized(IV)
    r = ranking.recommended
    r.candidate = dataclasses.replace(r.candidate, provenance_kind="spec-sheet", uncertainty={})
    run_intervals(out, ranking, 4, workers=1)
    iv = r.intervals
    assert iv["coefficients_drawn"] == [] and "seeds only" in iv["varies"] and "unknown, not zero" in iv["varies"]
    assert iv["latency_ms"]["p99_e2el"]["low"] < iv["latency_ms"]["p99_e2el"]["high"]  # the seeds still vary it
    assert any("unknown, not zero" in line for line in interval_notes(out))


def test_size_intervals_in_the_report_and_json(tmp_path):
    done = size(BASE, *sets(*IV), "--workers", "1", "--intervals", "2", "--out", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["intervals"]["runs"] == 2 and data["intervals"]["candidates"][0] == data["recommended"]
    best = next(c for c in data["candidates"] if c["label"] == data["recommended"])
    assert best["intervals"]["latency_ms"]["p99_tpot"]["median"] > 0
    assert all(c["intervals"] is None for c in data["candidates"] if c["label"] not in data["intervals"]["candidates"])
    md, page = (tmp_path / "report.md").read_text(), (tmp_path / "report.html").read_text()
    assert "## Intervals (90%, 2 draws)" in md and "leave-one-GPU-out spread" in md and "--intervals 2" in md
    assert "Intervals (90%, 2 draws)</h2>" in page and "of 2 draws" in data["answer"]


def test_intervals_need_at_least_two_runs():
    done = size(BASE, "--intervals", "1")
    assert done.returncode == 2 and "--intervals 1: must be a number of runs in [2, 1,000]" in done.stderr


def test_the_html_report_in_headless_chromium_shows_every_figure_and_table_whole(tmp_path):
    """report.html as a buyer opens it (Debian's chromium, headless, tests/helpers/browser.py): every figure
    loaded, no table or cell past the page's width, no console error; and the same checks fail on copies of the
    page broken each way (a figure's data cut, a table row too wide, a script error and a missing file)."""
    needs(chromium() is not None, "chromium (Debian's chromium package: apt-get install -y chromium)")
    args = sets(*SMALL, "search.candidates.gpus=[a10, l4]", "search.candidates.tensor_parallel_sizes=[1, 2]")
    assert size(BASE, *args, "--workers", "1", "--out", str(tmp_path)).returncode == 0
    page_html = (tmp_path / "report.html").read_text()
    figures = sorted(p.name for p in tmp_path.glob("*.png"))
    broken = {
        "figure": re.sub(r"base64,[A-Za-z0-9+/]{40}", "base64,AAAA", page_html, count=1),
        "table": page_html.replace("</tbody></table>", "<tr><td>" + "x" * 400 + "</td></tr></tbody></table>", 1),
        "console": page_html.replace("</body>", "<script>undefined_function()</script><img src='gone.png'></body>"),
    }
    for name, text in broken.items():
        (tmp_path / f"{name}.html").write_text(text)
    page, no_figure, cut_table, errors = inspect_pages(
        [tmp_path / "report.html", *(tmp_path / f"{name}.html" for name in broken)]
    )
    assert len(page.images) == len(figures) == 3 and not page.missing_images
    assert page.tables and not page.cut_off_tables and not page.page_overflows
    candidates = json.loads((tmp_path / "sizing.json").read_text())["candidates"]
    assert page.tables[0]["rows"] == len(candidates)  # the candidates table, every row
    assert page.console_errors == []
    assert page.text > 2000 and page.height > 2000  # the whole report laid out, not an error page
    # the checks catch what they are for
    assert no_figure.missing_images and not no_figure.cut_off_tables and not no_figure.console_errors
    assert cut_table.cut_off_tables and not cut_table.missing_images
    assert any("undefined_function" in e for e in errors.console_errors)
    assert any("gone.png" in e for e in errors.console_errors) and errors.missing_images


def test_the_purchase_objective_answer_quotes_purchase_costs():
    from planner.sizing.report.tables import answer, terminal_lines

    q = load_sizing(ROOT / BASE, [*SMALL, "search.money.objective=purchase", "search.candidates.gpus=[a10]",
                                  "search.candidates.tensor_parallel_sizes=[1]"])  # fmt: skip
    out = run_search(q, workers=1)
    ranking = rank(out)
    c, text = ranking.recommended.costs, answer(out, ranking)
    assert text.startswith("Buy") and f"${c.purchase_usd_per_month:,.0f}/month" in text
    assert f"${c.purchase_usd_per_million_output_tokens:,.2f} per 1M output tokens" in text
    # The terminal's table shows the costs the answer ranks by (it showed renting's, ordered by buying's).
    header, first = _table_head(terminal_lines(out, ranking))
    columns = header.split("  ")
    assert "buy: $/month" in columns and "buy: $ / 1M out tok" in columns and "$/month" not in columns
    assert f"${c.purchase_usd_per_month:,.0f}" in first and f"${c.rental_usd_per_month:,.0f} " not in first


def _table_head(lines: list[str]) -> tuple[str, str]:
    """The terminal table's header and first row."""
    at = next(i for i, line in enumerate(lines) if line.startswith("candidate "))
    return lines[at], lines[at + 1]


def test_spec_sheet_intervals_from_the_command_vary_the_seeds_only(tmp_path):
    args = sets("search.candidates.gpus=[cpu]", "search.money.rental_usd_per_gpu_hour={cpu: 0.1}",
                "search.candidates.tensor_parallel_sizes=[1]", "search.probe.num_requests=60")  # fmt: skip
    done = size(
        "scenarios/cpu_tiny.yaml", *args, "--workers", "1", "--intervals", "3", "--json", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    iv = json.loads(done.stdout)["candidates"][0]["intervals"]
    assert iv["provenance_kind"] == "spec-sheet" and iv["coefficients_drawn"] == []
    md = (tmp_path / "report.md").read_text()
    assert "seeds only (no coefficient uncertainty known)" in md and "unknown, not zero" in md


def test_the_vllm_serve_line_carries_every_setting_the_candidate_ran_with():
    from planner.scenario.load import load_scenario
    from planner.sizing.serve import vllm_serve_command

    plain = vllm_serve_command(load_scenario(ROOT / BASE))
    assert plain.startswith("vllm serve Qwen/Qwen-7B-Chat ") and "--enforce-eager" not in plain
    eager = vllm_serve_command(
        load_scenario(ROOT / BASE, ["engine.enforce_eager=true", "engine.num_gpu_blocks_override=300"])
    )
    assert "--enforce-eager" in eager and "--num-gpu-blocks-override 300" in eager
    assert "reserve-full-isl" not in plain  # vLLM's default: on
    older = vllm_serve_command(load_scenario(ROOT / BASE, ["engine.scheduler_reserve_full_isl=false"]))
    assert "--no-scheduler-reserve-full-isl" in older
    for baseline, words in (
        ("engine.scheduler=static", "the static scheduler"),
        ("engine.kv_cache=contiguous", "contiguous KV"),
    ):
        line = vllm_serve_command(load_scenario(ROOT / BASE, [baseline]))
        assert line == f"# no vllm serve line: {words} (a baseline the simulator runs) cannot be set in vLLM"


def test_the_cost_per_token_is_of_the_demands_own_token_volume():
    # A finite run's throughput ends in a drain (the last requests finish after the last arrival), and replicas x
    # a users share can exceed the demand's users: either priced fewer or more tokens than the demand sends.
    from planner.sizing.search import output_tokens_per_s, workload_shape

    rate = load_sizing(ROOT / BASE, [*SMALL, "search.demand={rate: 3}", "search.candidates.gpus=[l40s]",
                                     "search.candidates.tensor_parallel_sizes=[1]"])  # fmt: skip
    out = run_search(rate, workers=1)
    r = rank(out).recommended
    assert r is not None and r.costs.rental_usd_per_million_output_tokens == pytest.approx(
        r.costs.rental_usd_per_month / (3 * 120 * 3600 * rate.search.money.hours_per_month) * 1e6  # 120-token replies
    )
    users = load_sizing(ROOT / BASE, SMALL)  # 20 users
    at_share = probe_result(7, True)  # 7 users on each of 3 replicas: 21 users' worth of tokens
    assert output_tokens_per_s(users.search.demand, workload_shape(users), at_share) == pytest.approx(10.0 * 20 / 7)
