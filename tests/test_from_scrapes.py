"""`planner calibrate --from-vllm` on Prometheus scrapes alone: the windows between timestamped scrapes rebuilt
as a workload and fitted through the simulator; known coefficients come back within their stated uncertainty; a
lone scrape or scrapes without their time are refused (exit 2)."""

import re

import numpy as np
import pytest
from helpers import SCENARIOS, error_of

from planner.calibration.profile_loader import load_profile
from planner.cli import main
from planner.vllm_files import binned

H100 = str(SCENARIOS / "h100_llama31_8b_sharegpt_like.yaml")


def test_binned_quantiles_and_draws_keep_what_the_histogram_says():
    values = np.random.default_rng(0).lognormal(np.log(300), 0.8, 5000).astype(np.int64) + 1
    bounds = tuple(float(b) for b in (10, 20, 50, 100, 200, 500, 1000, 2000, 5000))
    cumulative = binned.cumulative_at(values, bounds)
    median, width = binned.quantile(bounds, cumulative, len(values), 0.5)
    assert 200 < median <= 500 and width == 300 and abs(median - np.median(values)) < width
    assert binned.quantile(bounds[:7], cumulative[:7], len(values), 0.99) is None  # in the +Inf bucket (> 1000)
    drawn = binned.draw_integers(bounds, cumulative, len(values), float(values.sum()), 8192, np.random.default_rng(1))
    assert np.array_equal(binned.cumulative_at(drawn, bounds), cumulative)  # as many in each bucket
    assert drawn.mean() == pytest.approx(values.mean(), rel=0.02)  # placed in them so that the sum holds


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """An H100 at a steady 10 requests/s with known coefficients (from_vllm_bench's truth), scraped every 30 s."""
    import dataclasses

    from planner.calibration.from_scrapes_bench import write_scrape_series
    from planner.calibration.from_vllm_bench import TRUTH_FACTORS
    from planner.calibration.resolve import resolve_cost_model
    from planner.scenario.load import load_scenario

    scenario = load_scenario(H100, ["workload.num_requests=1200", "workload.arrival.rate=10"])
    start, _ = resolve_cost_model(scenario)
    truth = dataclasses.replace(start, **{k: getattr(start, k) * f for k, f in TRUTH_FACTORS.items()})
    return truth, write_scrape_series(tmp_path_factory.mktemp("scrapes"), scenario, truth, 30.0)


def test_scrapes_alone_give_known_coefficients_back_within_their_uncertainty(series, tmp_path, capsys):
    truth, scrapes = series
    steady = tmp_path / "steady"
    steady.mkdir()
    for path in scrapes[1:-1]:  # from 30 s on: the windows of a running server
        (steady / path.name).write_text(path.read_text())
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", "--from-vllm", str(steady), "--scenario", H100, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ASSUMED: Poisson arrivals at" in printed and "Held out: the last window" in printed
    assert re.search(r"scrape-\d+\.prom \(held out\)", printed)
    assert "Gauges at each window's end" in printed and "mean over 3 windows: running " in printed
    assert re.search(r"pinned by scrape-\d+\.prom: \S+ \S+ \((TTFT|E2E|QUEUE|PREFILL|DECODE) \d+%", printed)
    profile = load_profile(out)
    pinned = [n for n in ("bandwidth_efficiency", "flops_efficiency") if n in profile.uncertainty]
    assert "bandwidth_efficiency" in pinned
    for name in pinned:
        std = profile.uncertainty[name]
        assert 0 < std < 0.5 * profile.coefficients[name] or name != "bandwidth_efficiency"
        assert abs(profile.coefficients[name] - getattr(truth, name)) <= 2 * std, name


def test_a_lone_scrape_or_scrapes_without_their_time_are_refused(series, tmp_path, capsys):
    _, scrapes = series
    argv = ["calibrate", "--from-vllm", str(scrapes[2]), "--scenario", H100]
    assert "one scrape: its counters hold the server's whole life" in error_of(argv, capsys)
    untimed = []
    for path in scrapes[1:3]:
        untimed.append(tmp_path / path.name)
        untimed[-1].write_text(re.sub(r" \d+$", "", path.read_text(), flags=re.MULTILINE))
    err = error_of(["calibrate", "--from-vllm", *map(str, untimed), "--scenario", H100], capsys)
    assert f"{untimed[1]}: its samples carry no timestamp" in err
    backwards = ["calibrate", "--from-vllm", str(scrapes[2]), str(scrapes[1]), "--scenario", H100]
    assert "a counter went backwards" in error_of(backwards, capsys)


def test_the_exported_phases_are_vllms(tmp_path):
    """queue + prefill = TTFT, prefill + decode = inference, queue + inference = E2E per request (vLLM's
    definitions), in vLLM's request-latency buckets; a request is first scheduled between its arrival and first token."""
    from planner.vllm_files import names
    from planner.vllm_files.prom_read import read_scrape

    out = tmp_path / "run"
    assert (
        main(["simulate", str(SCENARIOS / "cpu_tiny.yaml"), "--set", "workload.num_requests=40", "--out", str(out)])
        == 0
    )
    scrape = read_scrape(out / "vllm_metrics.prom")
    h = {
        name: scrape.histogram(name)
        for name in (names.TTFT, names.E2E, names.QUEUE, names.INFERENCE, names.PREFILL, names.DECODE)
    }
    for name in (names.E2E, names.QUEUE, names.INFERENCE, names.PREFILL, names.DECODE):
        assert h[name].bounds == names.REQUEST_LATENCY_BUCKETS_S and h[name].count == 40
    assert h[names.QUEUE].sum + h[names.PREFILL].sum == pytest.approx(h[names.TTFT].sum, rel=1e-9)
    assert h[names.PREFILL].sum + h[names.DECODE].sum == pytest.approx(h[names.INFERENCE].sum, rel=1e-9)
    assert h[names.QUEUE].sum + h[names.INFERENCE].sum == pytest.approx(h[names.E2E].sum, rel=1e-9)
    table = np.genfromtxt(out / "requests.csv", delimiter=",", names=True)
    assert np.all(table["arrival_s"] <= table["first_scheduled_s"])
    assert np.all(table["first_scheduled_s"] < table["first_token_s"])


def test_a_bench_file_fits_with_the_phases_of_the_scrape_that_counted_its_requests(tmp_path, capsys):
    """Run A's bench file and its scrape, run B's bench file held out: A is matched with its scrape's queue,
    prefill and decode times too; one file alone is not (its scrape counts the held-out requests)."""
    import dataclasses

    from planner.calibration.from_vllm_bench import write_vllm_files
    from planner.calibration.resolve import resolve_cost_model
    from planner.scenario.load import load_scenario

    files = []
    for rate, seed in ((40, 1), (20, 2)):
        scenario = load_scenario(
            H100, ["workload.num_requests=150", f"workload.arrival.rate={rate}", f"workload.seed={seed}"]
        )
        start, _ = resolve_cost_model(scenario)
        truth = dataclasses.replace(start, bandwidth_efficiency=start.bandwidth_efficiency * 0.8)
        files.append(write_vllm_files(tmp_path / str(rate), scenario, truth, 0.0, 0))
    (bench_a, scrape_a), (bench_b, _) = files
    argv = ["calibrate", "--from-vllm", str(bench_a), str(bench_b), str(scrape_a), "--scenario", H100]
    assert main([*argv, "--out", str(tmp_path / "p.yaml")]) == 0
    printed = capsys.readouterr().out
    assert f"{scrape_a}: its 150 requests are bench.json's: its QUEUE, PREFILL, DECODE matched too" in printed
    with_phases = int(re.search(r"(\d+) statistics", printed).group(1))
    profile = load_profile(tmp_path / "p.yaml")
    assert profile.coefficients["bandwidth_efficiency"] == pytest.approx(truth.bandwidth_efficiency, rel=0.03)
    alone = ["calibrate", "--from-vllm", str(bench_a), str(scrape_a), "--scenario", H100]
    assert main([*alone, "--out", str(tmp_path / "q.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "queue, prefill and decode times not matched: its 150 requests are bench.json's, held out" in printed
    assert with_phases >= int(re.search(r"(\d+) statistics", printed).group(1)) + 3  # a mean of each phase at least


def test_a_window_without_lengths_or_with_too_few_requests_is_refused(series, tmp_path, capsys):
    _, scrapes = series
    first, second = (scrapes[1].read_text(), scrapes[2].read_text())
    lengthless = []
    for name, text in (("a.prom", first), ("b.prom", second)):
        lengthless.append(tmp_path / name)
        kept = [line for line in text.splitlines() if "vllm:request_prompt_tokens" not in line]
        lengthless[-1].write_text("\n".join(kept) + "\n")
    err = error_of(["calibrate", "--from-vllm", *map(str, lengthless), "--scenario", H100], capsys)
    assert f"{lengthless[1]}: vllm:request_prompt_tokens: absent: the requests' lengths are drawn from it" in err
    later = tmp_path / "later.prom"  # the same counts a second on: a window of no request
    later.write_text(re.sub(r" (\d+)$", lambda m: f" {int(m.group(1)) + 1000}", first, flags=re.MULTILINE))
    err = error_of(["calibrate", "--from-vllm", str(scrapes[1]), str(later), "--scenario", H100], capsys)
    assert f"{later}: vllm:e2e_request_latency_seconds: no observation" in err
    from planner.calibration.from_scrapes_bench import write_scrape_series
    from planner.calibration.resolve import resolve_cost_model
    from planner.scenario.load import load_scenario

    tiny = load_scenario(H100, ["workload.num_requests=30", "workload.arrival.rate=10"])
    short = write_scrape_series(tmp_path / "short", tiny, resolve_cost_model(tiny)[0], 1.0)  # ~10 requests each
    err = error_of(["calibrate", "--from-vllm", str(short[1]), str(short[2]), "--scenario", H100], capsys)
    assert "_count = " in err and "the window finished fewer than 20 requests" in err


def test_simulate_writes_scrapes_that_fit_back_to_its_profile(tmp_path, capsys):
    """The round trip through the command line: `planner simulate --calibration TRUTH --out run --scrape-every 30`,
    then `calibrate --from-vllm` on the steady scrapes gives TRUTH's bandwidth efficiency back within its error."""
    import dataclasses

    from planner.calibration.profile import content_id, save_profile
    from planner.scenario.load import load_scenario

    scenario = load_scenario(H100, [])
    shipped = load_profile(SCENARIOS.parent / "planner" / "calibrations" / "h100-sxm-tp1.yaml")
    coefficients = dict(shipped.coefficients, bandwidth_efficiency=shipped.coefficients["bandwidth_efficiency"] * 0.8)
    truth = dataclasses.replace(
        shipped, id="", coefficients=coefficients, model=scenario.model.name, dtype=scenario.dtype
    )
    truth = dataclasses.replace(truth, id=content_id(truth.to_dict()))
    profile = save_profile(truth, tmp_path / "truth.yaml")
    run = tmp_path / "run"
    load = ["--set", "workload.num_requests=1200", "--set", "workload.arrival.rate=10"]
    argv = ["simulate", H100, *load, "--calibration", str(profile), "--out", str(run), "--scrape-every", "30"]
    assert main(argv) == 0
    assert "vllm_scrapes to " in capsys.readouterr().out
    scrapes = sorted((run / "vllm_scrapes").iterdir())
    assert [p.name for p in scrapes[:2]] == ["scrape-0000.prom", "scrape-0001.prom"] and len(scrapes) == 6
    out = tmp_path / "fitted.yaml"
    steady = [str(p) for p in scrapes[1:-1]]  # 30 s to 120 s: the windows of a running server
    assert main(["calibrate", "--from-vllm", *steady, "--scenario", H100, "--out", str(out)]) == 0
    fitted = load_profile(out)
    std = fitted.uncertainty["bandwidth_efficiency"]
    assert abs(fitted.coefficients["bandwidth_efficiency"] - coefficients["bandwidth_efficiency"]) <= 2 * std
    fleet = SCENARIOS / "mixed_gpus_llama31_8b_by_length.yaml"
    err = error_of(["simulate", str(fleet), "--out", str(tmp_path / "f"), "--scrape-every", "5"], capsys)
    assert "fleet: --scrape-every writes one engine's /metrics" in err
    assert "give --out" in error_of(["simulate", H100, "--scrape-every", "30"], capsys)


def test_a_mid_run_scrape_holds_the_last_steps_gauges(tmp_path, capsys):
    """scrape_series' gauges at t are those of the last step begun by t (running, waiting, KV blocks in use), the
    histograms only what ended by t; too many scrapes are refused."""
    import json

    from planner.outputs.results import build_summary
    from planner.scenario.load import load_scenario
    from planner.vllm_files import names
    from planner.vllm_files.export import scrape_series
    from planner.vllm_files.prom_read import read_scrape
    from sim.driver import simulate

    scenario = load_scenario(H100, ["workload.num_requests=300", "workload.arrival.rate=40"])
    result = simulate(scenario, None, record_steps=True)
    recorder = result.recorder
    summary = json.loads(json.dumps(build_summary("simulated", scenario, recorder, result.memory.to_dict(), 0, 0, {})))
    path = tmp_path / "mid.prom"
    path.write_text(scrape_series(summary, recorder, 3.0)[1])  # at 3 s
    scrape = read_scrape(path)
    steps = recorder.step_rows()
    last = int(np.flatnonzero(steps["start_s"] <= 3.0)[-1])
    gauges = {n: v for (n, _), v in scrape.gauges.items()}
    assert gauges[names.RUNNING] == steps["num_running"][last] > 0
    assert gauges[names.WAITING] == steps["num_waiting"][last]
    assert gauges[names.KV_USAGE] == pytest.approx(steps["kv_blocks_used"][last] / recorder.num_gpu_blocks)
    ended = int(np.sum(recorder.requests.view()["finished_s"] <= 3.0))
    assert scrape.histogram(names.E2E).count == ended < 300 and scrape.end_s == 3.0
    argv = [
        "simulate",
        H100,
        "--set",
        "workload.num_requests=20",
        "--out",
        str(tmp_path / "r"),
        "--scrape-every",
        "1e-4",
    ]
    assert "scrapes (at most 10,000); scrape less often" in error_of(argv, capsys)
