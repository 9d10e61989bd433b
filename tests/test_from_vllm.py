"""vLLM's two formats both ways: `planner simulate/run --out` write a bench-serve result and a /metrics scrape
that the readers give back exactly; `planner calibrate --from-vllm` fits them through the simulator, and every
bad file is one message naming the file and the field (exit 2)."""

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import SCENARIOS, error_of, needs_torch

from planner.calibration.profile_loader import load_profile
from planner.cli import main
from planner.vllm_files.bench_read import read_bench
from planner.vllm_files.prom_read import read_scrape

CPU_TINY = str(SCENARIOS / "cpu_tiny.yaml")
H100 = str(SCENARIOS / "h100_llama31_8b_sharegpt_like.yaml")


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "run"
    assert main(["simulate", CPU_TINY, "--set", "workload.num_requests=60", "--out", str(out)]) == 0
    return out


def _requests_csv(folder: Path) -> dict[str, np.ndarray]:
    table = np.genfromtxt(folder / "requests.csv", delimiter=",", names=True)
    return {name: table[name] for name in table.dtype.names}


def test_the_exported_files_say_what_the_run_measured(simulated):
    summary = json.loads((simulated / "summary.json").read_text())
    run = read_bench(simulated / "vllm_bench.json")
    req = _requests_csv(simulated)
    order = np.argsort(req["arrival_s"], kind="stable")
    assert len(run) == summary["completed"] == 60
    np.testing.assert_allclose(run.ttft_s, (req["first_token_s"] - req["arrival_s"])[order], atol=2e-6)
    np.testing.assert_allclose(run.e2e_s, (req["finished_s"] - req["arrival_s"])[order], atol=2e-6)
    assert run.tpot_s.mean() * 1e3 == pytest.approx(summary["mean_tpot_ms"], rel=1e-9)
    np.testing.assert_array_equal(run.prompt_tokens, req["prompt_tokens"][order])
    bench = json.loads((simulated / "vllm_bench.json").read_text())
    for key in ("duration", "completed", "request_throughput", "output_throughput", "p99_ttft_ms", "mean_itl_ms"):
        assert bench[key] == pytest.approx(summary[key.replace("duration", "duration_s")])

    scrape = read_scrape(simulated / "vllm_metrics.prom")
    assert scrape.models() == {"tiny-llama"}
    assert scrape.cache_config["num_gpu_blocks"] == str(summary["memory"]["num_gpu_blocks"])
    e2e = scrape.histogram("vllm:e2e_request_latency_seconds")
    assert e2e.count == 60 and e2e.sum == pytest.approx(run.e2e_s.sum())
    itl = scrape.histogram("vllm:inter_token_latency_seconds")
    assert itl.count == summary["total_output_tokens"] - 60  # every gap: output tokens - 1 per request
    assert itl.sum / itl.count * 1e3 == pytest.approx(summary["mean_itl_ms"], rel=1e-9)
    ttft = scrape.histogram("vllm:time_to_first_token_seconds")
    below = int(np.sum(run.ttft_s <= ttft.bounds[3]))
    assert ttft.cumulative[3] == below


def _edited_bench(folder: Path, tmp_path: Path, edit) -> Path:
    data = json.loads((folder / "vllm_bench.json").read_text())
    edit(data)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


def _edited_scrape(folder: Path, tmp_path: Path, old: str, new: str, name: str = "m.prom", count: int = 1) -> Path:
    text = (folder / "vllm_metrics.prom").read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, count))
    return path


def _fit_error(files: list[Path], capsys, scenario: str = CPU_TINY) -> str:
    return error_of(["calibrate", "--from-vllm", *map(str, files), "--scenario", scenario], capsys)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d.clear() or d.update({"results": []}), ["duration: missing", "another tool"]),
        (lambda d: d.pop("itls"), ["itls: missing", "--save-detailed"]),
        (lambda d: d["ttfts"].pop(), ["ttfts: 59 entries", "input_lens has 60"]),
        (lambda d: d["output_lens"].__setitem__(3, -1), ["output_lens[3] = -1"]),
        (lambda d: d.update({"completed": 61}), ["completed = 61", "60 successful"]),
        (
            lambda d: d.update({"model_id": "meta-llama/Llama-3.1-8B"}),
            ["model_id = 'meta-llama/Llama-3.1-8B'", "tiny-llama"],
        ),
    ],
)
def test_a_bad_bench_file_is_named_with_its_field(simulated, tmp_path, capsys, edit, words):
    err = _fit_error([_edited_bench(simulated, tmp_path, edit)], capsys)
    assert "bench.json" in err and all(w in err for w in words), err


def test_a_truncated_bench_file_says_it_is_cut(simulated, tmp_path, capsys):
    path = tmp_path / "cut.json"
    path.write_text((simulated / "vllm_bench.json").read_text()[:5000])
    err = _fit_error([path], capsys)
    assert "cut.json: line 1" in err and "not JSON" in err and "cut off" in err


def test_bad_scrapes_are_refused(simulated, tmp_path, capsys):
    bench = simulated / "vllm_bench.json"
    bucket = 'vllm:e2e_request_latency_seconds_bucket{model_name="tiny-llama",engine="0",le="+Inf"} 60.0'
    falling = _edited_scrape(simulated, tmp_path, bucket, bucket.replace("60.0", "59.0"))
    err = _fit_error([bench, falling], capsys)
    assert "m.prom: vllm:e2e_request_latency_seconds" in err and "inconsistent histogram buckets" in err

    other = _edited_scrape(simulated, tmp_path, 'num_gpu_blocks="', 'num_gpu_blocks="9', "other.prom")
    err = _fit_error([bench, simulated / "vllm_metrics.prom", other], capsys)
    assert "other.prom: vllm:cache_config_info" in err and "different servers" in err

    counter = 'vllm:prompt_tokens_total{model_name="tiny-llama",engine="0"} '
    text = (simulated / "vllm_metrics.prom").read_text()
    value = text.split(counter)[1].split("\n")[0]
    restarted = _edited_scrape(simulated, tmp_path, counter + value, counter + "3.0", "restarted.prom")
    err = _fit_error([bench, simulated / "vllm_metrics.prom", restarted], capsys)
    assert "restarted.prom: vllm:prompt_tokens_total" in err and "went backwards" in err

    model = _edited_scrape(simulated, tmp_path, 'model_name="tiny-llama"', 'model_name="other-model"', "model.prom", -1)
    err = _fit_error([bench, model], capsys)
    assert "model.prom: model_name = 'other-model'" in err


def test_one_scrape_alone_and_a_missing_scenario_are_refused(simulated, capsys):
    err = _fit_error([simulated / "vllm_metrics.prom"], capsys)
    assert "vllm_metrics.prom: one scrape: its counters hold the server's whole life" in err and "no window" in err
    err = error_of(["calibrate", "--from-vllm", str(simulated / "vllm_bench.json")], capsys)
    assert "--from-vllm needs --scenario" in err


def test_the_fit_gets_a_known_bandwidth_efficiency_back(tmp_path, capsys):
    """Two loads simulated with the scenario's coefficients but bandwidth_efficiency x 0.8, written as vLLM's
    files (no noise), a third held out: the fit gives the efficiency back, the profile drives `simulate`."""
    from planner.calibration.from_vllm_bench import write_vllm_files
    from planner.calibration.resolve import resolve_cost_model
    from planner.scenario.load import load_scenario

    files = []
    for rate, seed in ((8, 1), (30, 2), (16, 3)):
        scenario = load_scenario(
            H100, ["workload.num_requests=120", f"workload.arrival.rate={rate}", f"workload.seed={seed}"]
        )
        start, _ = resolve_cost_model(scenario)
        truth = dataclasses.replace(start, bandwidth_efficiency=start.bandwidth_efficiency * 0.8)
        files.append(write_vllm_files(tmp_path / str(rate), scenario, truth, 0.0, 0)[0])
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", "--from-vllm", *map(str, files), "--scenario", H100, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        "Fit through the simulator" in printed
        and "Held-out validation" in printed
        and "16/bench.json (held out)" not in printed
    )
    profile = load_profile(out)
    assert profile.source == "vllm-metrics" and profile.provenance.startswith("fitted from vLLM metrics (files: ")
    assert profile.coefficients["bandwidth_efficiency"] == pytest.approx(truth.bandwidth_efficiency, rel=0.03)
    assert main(["simulate", H100, "--set", "workload.num_requests=20", "--calibration", str(out)]) == 0
    assert profile.id in capsys.readouterr().out
    out.rename(Path(os.environ["PLANNER_PROFILE_DIR"]) / out.name)  # where calibration: auto (and size) look
    _, provenance = resolve_cost_model(load_scenario(H100))
    assert provenance.kind == "calibrated" and provenance.profile_id == profile.id


@needs_torch
def test_a_live_cpu_run_round_trips(cpu_tiny_run, tmp_path, capsys):
    """`planner run` writes vLLM's files too, and they fit (one file: its last requests held out)."""
    run = read_bench(cpu_tiny_run.folder / "vllm_bench.json")
    assert len(run) == cpu_tiny_run.summary["completed"]
    files = [cpu_tiny_run.folder / "vllm_bench.json", cpu_tiny_run.folder / "vllm_metrics.prom"]
    out = tmp_path / "live.yaml"
    assert main(["calibrate", "--from-vllm", *map(str, files), "--scenario", CPU_TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Held out: the last" in printed and "vllm_bench.json (held out)" in printed
    assert load_profile(out).source == "vllm-metrics"


def test_a_long_run_writes_the_summary_form(tmp_path, monkeypatch, capsys):
    """Beyond MAX_DETAILED_TOKENS the bench file has no per-request lists, as bench serve without
    --save-detailed; reading it for a fit says so."""
    from planner.vllm_files import export

    monkeypatch.setattr(export, "MAX_DETAILED_TOKENS", 10)
    out = tmp_path / "run"
    assert main(["simulate", CPU_TINY, "--set", "workload.num_requests=8", "--out", str(out)]) == 0
    bench = json.loads((out / "vllm_bench.json").read_text())
    assert "itls" not in bench and bench["completed"] == 8 and bench["mean_ttft_ms"] > 0
    assert "--save-detailed" in _fit_error([out / "vllm_bench.json"], capsys)


def test_the_start_is_first_matched_to_the_observed_speed():
    """Statistics of an engine 3x slower than the start: the one-factor search finds about 3."""
    from planner.calibration.vllm_fit import _slowed, matched_speed
    from sim.cost_coefficients import CostCoefficients

    names = ["flops_efficiency", "bandwidth_efficiency", "step_overhead_s"]
    start = CostCoefficients(flops_efficiency=0.3, bandwidth_efficiency=0.3)

    def predict(c):  # a step time that each coefficient moves
        return np.array([1 / c.flops_efficiency + c.step_overhead_s * 1e3, 1 / c.bandwidth_efficiency])

    measured = predict(_slowed(start, names, 3.0))
    factor, matched = matched_speed(predict, start, names, measured)
    assert factor == pytest.approx(3.0, rel=0.03)
    assert matched.bandwidth_efficiency == pytest.approx(0.1, rel=0.03)


def test_an_unwritable_out_is_refused_before_the_fit(simulated, tmp_path, capsys):
    argv = ["calibrate", "--from-vllm", str(simulated / "vllm_bench.json"), "--scenario", CPU_TINY]
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path)]) == 2
    printed = capsys.readouterr()
    assert "is a directory" in printed.err.lower() and "Read:" not in printed.out  # refused before reading a file


def test_options_of_the_other_ways_are_refused_with_it(simulated, capsys):
    bench = str(simulated / "vllm_bench.json")
    for extra in (["--device", "cpu"], ["--held-out-requests", "8"], ["--budget-s", "5"], [CPU_TINY]):
        err = error_of(["calibrate", "--from-vllm", bench, "--scenario", CPU_TINY, *extra], capsys)
        assert "--from-vllm fits vLLM's files: give it no" in err
    err = error_of(["calibrate", "--device", "cpu", "--scenario", CPU_TINY], capsys)
    assert "--scenario and --set go with --from-vllm" in err


def test_a_folder_of_scrapes_is_read_as_windows(simulated, tmp_path, capsys):
    """Scrapes in name order: each window is the later less the earlier (here from an all-zero first scrape)."""
    import re

    folder = tmp_path / "scrapes"
    folder.mkdir()
    text = (simulated / "vllm_metrics.prom").read_text()
    zero = re.sub(r"^(vllm:(?!cache_config_info)\S+) \S+ \d+$", r"\1 0.0 0", text, flags=re.MULTILINE)
    zero = re.sub(r" \d+$", " 0", zero, flags=re.MULTILINE)  # taken at 0: the window is the run
    (folder / "scrape-1.prom").write_text(zero)
    (folder / "scrape-2.prom").write_text(text)
    out = tmp_path / "p.yaml"
    argv = ["calibrate", "--from-vllm", str(simulated / "vllm_bench.json"), str(folder), "--scenario", CPU_TINY]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "scrape-2.prom: Prometheus, 60 requests finished" in printed
    assert "num_gpu_blocks = " in printed and "(vllm:cache_config_info, " in printed
    (folder / "scrape-0.prom").write_text(text)  # now first in name order: the counters fall after it
    assert "went backwards" in error_of(argv, capsys)


def test_a_restart_between_scrapes_is_refused_even_when_the_counters_grew(simulated, tmp_path, capsys):
    text = (simulated / "vllm_metrics.prom").read_text()
    (tmp_path / "a.prom").write_text(text + "process_start_time_seconds 1700000000.0\n")
    (tmp_path / "b.prom").write_text(text + "process_start_time_seconds 1700000500.0\n")
    err = _fit_error([simulated / "vllm_bench.json", tmp_path / "a.prom", tmp_path / "b.prom"], capsys)
    assert (
        "b.prom: process_start_time_seconds = 1700000500, but 1700000000" in err
        and "restarted between the scrapes" in err
    )


@pytest.mark.parametrize(
    ("traffic", "said"),
    [
        ({"request_rate": 20.0, "burstiness": 1.0, "max_concurrency": None}, "ASSUMED arrivals: no start_times; poisson at 20"),
        ({"request_rate": 20.0, "burstiness": 0.5, "max_concurrency": None}, "gamma at 20 requests/s (burstiness 0.5)"),
        ({"request_rate": "inf", "max_concurrency": 4}, "a closed loop of max_concurrency = 4 users"),
        ({"request_rate": "inf", "max_concurrency": None}, "request_rate inf: all at 0"),
    ],
)  # fmt: skip
def test_a_file_without_start_times_has_its_arrivals_assumed_and_said(simulated, tmp_path, capsys, traffic, said):
    def edit(data):
        del data["start_times"]
        data.update(traffic)

    bench = _edited_bench(simulated, tmp_path, edit)
    assert (
        main(["calibrate", "--from-vllm", str(bench), "--scenario", CPU_TINY, "--out", str(tmp_path / "p.yaml")]) == 0
    )
    assert said in capsys.readouterr().out


def test_a_rate_with_a_concurrency_cap_needs_the_start_times(simulated, tmp_path, capsys):
    bench = _edited_bench(simulated, tmp_path, lambda d: d.pop("start_times") and d.update({"max_concurrency": 4}))
    err = _fit_error([bench], capsys)
    assert "bench.json: start_times: missing; request_rate = 20 with max_concurrency = 4" in err


def test_served_model_names_match_the_catalog_model():
    from planner.catalog import catalog_model
    from planner.vllm_files.inputs import model_matches

    model = catalog_model("llama-3.1-8b")
    assert model.checkpoint and model_matches(model.checkpoint, model) and model_matches("llama-3.1-8b", model)
    assert model_matches("/models/" + model.checkpoint.rsplit("/", 1)[-1] + "/", model)
    assert not model_matches("Qwen/Qwen2.5-7B-Instruct", model)
