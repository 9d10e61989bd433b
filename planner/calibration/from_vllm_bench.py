"""`python -m planner.calibration.from_vllm_bench`: figures of `planner calibrate --from-vllm`.

1. Synthetic recovery: the simulator with known coefficients serves a ShareGPT-like load on an H100
   (scenarios/h100_llama31_8b_sharegpt_like.yaml), its run is written as vLLM's files with multiplicative noise
   on every request's TTFT and gaps, and the fit must give the coefficients back within their standard errors.
2. Fit time for one bench-serve file of 1,000 requests (the target: under 60 s on a 2-core machine).
3. With --live: live CPU runs of scenarios/cpu_tiny.yaml at three loads written as vLLM's files, the first two
   fitted, the third held out (the CPU targets of `planner calibrate`), beside `calibrate --from` on the same runs,
   the two profiles judged by their predicted step times (planner/calibration/from_vllm_round_trip.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "h100_llama31_8b_sharegpt_like.yaml"
# The truth: the scenario's starting coefficients (its shipped H100 profile) moved by these factors.
RATES = (10.0, 40.0, 25.0)  # the synthetic recovery's files, requests/s: two loads fitted, the third held out
LIVE_RATES = (20.0, 5.0, 10.0)  # the live CPU runs, requests/s: two fitted, the third held out
TRUTH_FACTORS = {"bandwidth_efficiency": 0.8, "flops_efficiency": 0.75, "step_overhead_s": 1.5}


def write_vllm_files(folder: Path, scenario, coefficients, noise: float, seed: int) -> tuple[Path, Path]:
    """The scenario simulated with `coefficients`, written as vLLM's two files; every request's TTFT and gaps
    multiplied by exp(N(0, noise)) (one draw per request and quantity)."""
    from planner.outputs.results import build_summary
    from planner.vllm_files.export import bench_result, metrics_text
    from sim.driver import simulate

    result = simulate(scenario, coefficients, record_steps=False)
    summary = json.loads(
        json.dumps(build_summary("simulated", scenario, result.recorder, result.memory.to_dict(), 0, 0, {}))
    )
    bench = bench_result(summary, result.recorder)
    rng = np.random.default_rng(seed)
    n = len(bench["ttfts"])
    ttft_factor, gap_factor = np.exp(rng.normal(0, noise, n)), np.exp(rng.normal(0, noise, n))
    bench["ttfts"] = (np.asarray(bench["ttfts"]) * ttft_factor).tolist()
    bench["itls"] = [[g * f for g in gaps] for gaps, f in zip(bench["itls"], gap_factor.tolist())]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench.json").write_text(json.dumps(bench))
    (folder / "metrics.prom").write_text(metrics_text(summary, result.recorder))
    return folder / "bench.json", folder / "metrics.prom"


def _calibrate(files: list[Path], scenario: Path, out: Path, overrides: list[str]) -> tuple[float, dict]:
    from planner.calibration.profile_loader import load_profile
    from planner.cli import main

    started = time.perf_counter()
    args = ["calibrate", "--from-vllm", *map(str, files), "--scenario", str(scenario), "--out", str(out)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # the fit's own report: only the figures below are printed
        code = main(args + [f"--set={o}" for o in overrides])
    if code != 0:
        raise SystemExit(f"planner {' '.join(args)}: exit {code}\n{printed.getvalue()}")
    return time.perf_counter() - started, load_profile(out)


def synthetic_recovery(
    num_requests: int, noise: float, seed: int, folder: Path, rates: tuple[float, ...]
) -> list[dict]:
    """Per coefficient of TRUTH_FACTORS: truth, start, fitted, standard error (None: not fitted). One bench
    file per rate (seeds seed, seed+1, ...), the last held out."""
    from planner.calibration.resolve import resolve_cost_model
    from planner.scenario.load import load_scenario

    overrides = [f"workload.num_requests={num_requests}"]
    start, _ = resolve_cost_model(load_scenario(SCENARIO, overrides))
    truth = dataclasses.replace(start, **{k: getattr(start, k) * f for k, f in TRUTH_FACTORS.items()})
    files = []
    for i, rate in enumerate(rates):
        load = [*overrides, f"workload.arrival.rate={rate}", f"workload.seed={seed + i}"]
        files.append(write_vllm_files(folder / f"rate{rate:g}", load_scenario(SCENARIO, load), truth, noise, seed)[0])
    seconds, profile = _calibrate(files, SCENARIO, folder / "profile.yaml", overrides)
    rows = []
    for name in TRUTH_FACTORS:
        std = profile.uncertainty.get(name)
        rows.append(
            {
                "name": name,
                "truth": getattr(truth, name),
                "start": getattr(start, name),
                "fitted": profile.coefficients[name],
                "std": std,
                "seconds": seconds,
            }
        )
    return rows


def timed_fit(num_requests: int, folder: Path) -> float:
    """Seconds of `planner calibrate --from-vllm` on one bench file of num_requests (the scenario's load)."""
    from planner.calibration.resolve import resolve_cost_model
    from planner.scenario.load import load_scenario

    overrides = [f"workload.num_requests={num_requests}"]
    scenario = load_scenario(SCENARIO, overrides)
    start, _ = resolve_cost_model(scenario)
    truth = dataclasses.replace(start, **{k: getattr(start, k) * f for k, f in TRUTH_FACTORS.items()})
    bench, _ = write_vllm_files(folder, scenario, truth, 0.05, 0)
    return _calibrate([bench], SCENARIO, folder / "profile.yaml", overrides)[0]


def _row(r: dict) -> str:
    head = f"  {r['name']:<24}{r['truth']:>12.4g}{r['start']:>12.4g}{r['fitted']:>12.4g}"
    if r["std"] is None:
        return head + f"{'-':>10}  not fitted (kept at its start)"
    return head + f"{r['std']:>10.2g}  {abs(r['fitted'] - r['truth']) / r['std']:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests of the timed bench file")
    parser.add_argument("--recovery-requests", type=int, default=400, help="requests per synthetic recovery file")
    parser.add_argument(
        "--rates", type=float, nargs="+", default=list(RATES), help="requests/s per file; the last is held out"
    )
    parser.add_argument("--noise", type=float, default=0.05, help="std of the log-normal noise on TTFT and gaps")
    parser.add_argument("--seeds", type=int, default=3, help="noise seeds of the synthetic recovery")
    parser.add_argument("--live", action="store_true", help="also live CPU runs of cpu_tiny.yaml (needs torch)")
    parser.add_argument("--live-rates", type=float, nargs="+", default=list(LIVE_RATES), help="the last held out")
    parser.add_argument("--live-requests", type=int, default=96, help="requests per live run")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="from-vllm-bench-") as tmp:
        for seed in range(args.seeds):
            results.append(
                synthetic_recovery(args.recovery_requests, args.noise, seed, Path(tmp) / f"s{seed}", tuple(args.rates))
            )
        seconds = timed_fit(args.requests, Path(tmp) / "timed")
        live = []
        if args.live:
            from planner.calibration.from_vllm_round_trip import live_round_trip

            live = live_round_trip(Path(tmp), args.live_requests, tuple(args.live_rates))
    rates = ", ".join(f"{r:g}" for r in args.rates[:-1])
    print(
        f"\nSynthetic recovery ({SCENARIO.name}; {args.recovery_requests} requests at each of {rates} requests/s"
        f" fitted, {args.rates[-1]:g} held out; noise {args.noise:.0%} log-normal per request on TTFT and gaps)"
    )
    inside = total = 0
    for seed, rows in enumerate(results):
        print(f"seed {seed} (fit {rows[0]['seconds']:.1f} s)")
        print(f"  {'coefficient':<24}{'truth':>12}{'start':>12}{'fitted':>12}{'std':>10}  |fitted - truth| / std")
        for r in rows:
            print(_row(r))
            if r["std"] is not None:
                inside += abs(r["fitted"] - r["truth"]) <= 2 * r["std"]
                total += 1
    print(f"Within 2 standard errors of the truth: {inside} of {total} fitted coefficients")
    print(
        f"Fit time, one bench-serve file of {args.requests:,} requests: {seconds:.1f} s (target < 60 s; on a shared"
        " machine this includes the others' load)"
    )
    if live:
        rates = ", ".join(f"{r:g}" for r in args.live_rates[:-1])
        print(
            f"\nLive CPU runs of cpu_tiny.yaml ({args.live_requests} requests at {rates} requests/s fitted,"
            f" {args.live_rates[-1]:g} held out), written as planner run --out writes them (vLLM's files among them):"
        )
        print("\n".join(live))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
