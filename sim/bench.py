"""The simulator's speed and memory benchmark: `python -m sim.bench`.

Runs scenarios/a100_llama2_7b_azure_10k.yaml (10,000 requests with the Azure conversation trace's token
counts at 2 req/s, Llama-2-7B on one A100-80GB, continuous batching) and the same at 100,000 requests,
each in a fresh process so that its peak RSS is its own, and prints wall time, simulated requests per
second and peak RSS. Targets: 10,000 requests in <= 5 s; 100,000 with peak RSS < 1 GB. This is a
benchmark, not a test: the machine is shared and timings are noisy, so it prints figures and verdicts.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "a100_llama2_7b_azure_10k.yaml"
TARGET_10K_WALL_S = 5.0
TARGET_PEAK_RSS_BYTES = 1e9


def measure(num_requests: int) -> dict:
    """One simulation in this process: wall time of the run (scenario loading excluded) and peak RSS."""
    from planner.scenario import load_scenario
    from sim.driver import simulate
    from sim.metrics import summarize

    scenario = load_scenario(SCENARIO, [f"workload.num_requests={num_requests}"])
    start = time.perf_counter()
    result = simulate(scenario, record_steps=False)
    summary = summarize(result.recorder, scenario.slo)
    wall_s = time.perf_counter() - start
    return {
        "num_requests": num_requests,
        "wall_s": wall_s,
        "simulated_requests_per_s": summary["completed"] / wall_s,
        "steps": result.recorder.num_steps,
        "simulated_duration_s": summary["duration_s"],
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux: KiB
    }


def measure_in_subprocess(num_requests: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "sim.bench", "--one", str(num_requests)], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size, print JSON
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    print(f"scenario: {SCENARIO.name} (record_steps=False, as `planner simulate` without --out)")
    print(f"{'requests':>10}{'wall s':>9}{'sim req/s':>11}{'steps':>11}{'peak RSS MB':>13}  verdict")
    for size in args.sizes:
        r = measure_in_subprocess(size)
        verdicts = []
        if size == 10_000:
            verdicts.append(
                f"wall <= {TARGET_10K_WALL_S:g} s: {'PASS' if r['wall_s'] <= TARGET_10K_WALL_S else 'MISS'}"
            )
        verdicts.append(f"RSS < 1 GB: {'PASS' if r['peak_rss_bytes'] < TARGET_PEAK_RSS_BYTES else 'MISS'}")
        print(
            f"{size:>10,}{r['wall_s']:>9.2f}{r['simulated_requests_per_s']:>11,.0f}{r['steps']:>11,}"
            f"{r['peak_rss_bytes'] / 1e6:>13,.0f}  {'; '.join(verdicts)}"
        )


if __name__ == "__main__":
    main()
