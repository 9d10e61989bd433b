"""`python -m planner.calibration.from_scrapes_bench`: figures of `planner calibrate --from-vllm` given Prometheus
scrapes alone.

Synthetic recovery: the simulator with known coefficients (from_vllm_bench.TRUTH_FACTORS) serves a ShareGPT-like
load on an H100 (scenarios/h100_llama31_8b_sharegpt_like.yaml) at a steady rate, scraped every SCRAPE_INTERVAL_S
as a Prometheus server would (planner.vllm_files.export.scrape_series); the scrapes of the steady middle are
fitted (the last window held out), for a few seeds, and each fitted coefficient is set against the truth in
units of its reported standard error. `--write DIR` only writes the first seed's steady scrapes. The start-up and drain windows are left out: a steady rate is what the
scrapes-only fit assumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from planner.calibration.from_vllm_bench import SCENARIO, TRUTH_FACTORS, _calibrate

SCRAPE_INTERVAL_S = 30.0
RATE = 10.0  # requests/s: well inside the H100's capacity for this workload


def write_scrape_series(folder: Path, scenario, coefficients, interval_s: float) -> list[Path]:
    """The scenario simulated with `coefficients`, scraped every interval_s (and as it ends), one file each."""
    from planner.outputs.results import build_summary
    from planner.vllm_files.export import scrape_series
    from sim.driver import simulate

    result = simulate(scenario, coefficients, record_steps=True)  # the gauges are the steps'
    summary = json.loads(
        json.dumps(build_summary("simulated", scenario, result.recorder, result.memory.to_dict(), 0, 0, {}))
    )
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, text in enumerate(scrape_series(summary, result.recorder, interval_s)):
        paths.append(folder / f"scrape-{i:04d}.prom")
        paths[-1].write_text(text)
    return paths


def steady_scrapes(num_requests: int, seed: int, folder: Path, steady: Path):
    """The truth's scrapes every SCRAPE_INTERVAL_S (in folder), those of the steady middle copied to `steady`:
    from the first after the start to the last before the drain. The truth and the start coefficients."""
    from planner.calibration.resolve import resolve_cost_model
    from planner.scenario.load import load_scenario

    overrides = [f"workload.num_requests={num_requests}", f"workload.arrival.rate={RATE:g}", f"workload.seed={seed}"]
    scenario = load_scenario(SCENARIO, overrides)
    start, _ = resolve_cost_model(scenario)
    truth = dataclasses.replace(start, **{k: getattr(start, k) * f for k, f in TRUTH_FACTORS.items()})
    scrapes = write_scrape_series(folder, scenario, truth, SCRAPE_INTERVAL_S)
    steady.mkdir(parents=True, exist_ok=True)
    for path in scrapes[1:-2]:
        (steady / path.name).write_text(path.read_text())
    return truth, start


def recovery(num_requests: int, seed: int, folder: Path) -> tuple[float, list[dict]]:
    """Seconds of the fit and, per coefficient of TRUTH_FACTORS: truth, start, fitted, standard error."""
    truth, start = steady_scrapes(num_requests, seed, folder / "all", folder / "steady")
    overrides = [f"workload.num_requests={num_requests}", f"workload.arrival.rate={RATE:g}", f"workload.seed={seed}"]
    seconds, profile = _calibrate([folder / "steady"], SCENARIO, folder / "profile.yaml", overrides)
    rows = [
        {
            "name": name,
            "truth": getattr(truth, name),
            "start": getattr(start, name),
            "fitted": profile.coefficients[name],
            "std": profile.uncertainty.get(name),
        }
        for name in TRUTH_FACTORS
    ]
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--write", type=Path, metavar="DIR", help="only write seed 0's steady scrapes to DIR")
    args = parser.parse_args()
    if args.write is not None:
        with tempfile.TemporaryDirectory() as tmp:
            steady_scrapes(args.requests, 0, Path(tmp), args.write)
        names = sorted(p.name for p in args.write.iterdir())
        print(f"wrote {len(names)} scrapes, {names[0]} to {names[-1]}, to {args.write}")
        return
    print(
        f"Synthetic recovery from scrapes alone ({SCENARIO.name}; {args.requests} requests at {RATE:g} requests/s,"
        f" scraped every {SCRAPE_INTERVAL_S:g} s; the steady windows fitted, the last held out)"
    )
    within = total = 0
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            _, rows = recovery(args.requests, seed, Path(tmp))
        print(f"seed {seed}")  # no fit time: the output is a docs page's, rerun by its test
        print(f"  {'coefficient':<26}{'truth':>10}{'start':>12}{'fitted':>12}{'std':>10}  |fitted - truth| / std")
        for r in rows:
            if r["std"] is None:
                print(f"  {r['name']:<26}{r['truth']:>10.4g}{r['start']:>12.4g}{r['fitted']:>12.4g}  not fitted")
                continue
            off = abs(r["fitted"] - r["truth"]) / r["std"]
            within, total = within + (off <= 2), total + 1
            print(
                f"  {r['name']:<26}{r['truth']:>10.4g}{r['start']:>12.4g}{r['fitted']:>12.4g}{r['std']:>10.2g}  {off:.1f}"
            )
    print(f"Within 2 standard errors of the truth: {within} of {total} fitted coefficients")


if __name__ == "__main__":
    main()
