"""The simulator's scale benchmark: `python -m sim.bench_scale [--sizes N ...] [--steps-to DIR]` (memory and
linear time; `python -m sim.bench` compares whole-process speed against a commit).

Runs scenarios/a100_llama2_7b_azure_10k.yaml (10,000 requests with the Azure conversation trace's token
counts at 2 req/s, Llama-2-7B on one A100-80GB, continuous batching) at 10,000, 100,000 and 1,000,000
requests by default, each in a fresh process so that its peak RSS is its own, and prints wall time,
simulated requests per second and peak RSS. Without --steps-to it runs as `planner simulate` without
--out (no step rows); with it, as with --out: every step row is written to DIR/steps-N.csv as the run goes.
Targets: 10,000 requests in <= 5 s; peak RSS < 1 GB at every size. This is a benchmark, not a test: the
machine is shared and timings are noisy, so it prints figures and verdicts.
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


def measure(num_requests: int, steps_to: Path | None = None) -> dict:
    """One simulation in this process: wall time of the run (scenario loading excluded) and peak RSS."""
    from planner.outputs.results import StepsCsv
    from planner.scenario.load import load_scenario
    from sim.driver import simulate
    from sim.metrics import summarize

    scenario = load_scenario(SCENARIO, [f"workload.num_requests={num_requests}"])
    # CPU seconds when each fifth of the requests had finished: the first and the last fifth cost the same per
    # request if time is linear in requests (a structure growing with the run would make the last one dearer).
    # The simulator reports progress every 256 finished requests: the fifths are rounded down to those.
    marks = [num_requests * k // 5 // 256 * 256 for k in range(5)] + [num_requests]
    cpu_at: dict[int, float] = {}

    def progress(done: int, total: int) -> None:
        if done in marks:
            cpu_at[done] = time.process_time()

    start, start_cpu = time.perf_counter(), time.process_time()
    cpu_at[0] = start_cpu
    sink = StepsCsv(steps_to / f"steps-{num_requests}.csv") if steps_to else None
    result = simulate(scenario, record_steps=False, steps_sink=sink, progress=progress)
    if sink is not None:
        result.recorder.spill_steps()
        sink.close()
    summary = summarize(result.recorder, scenario.slo)
    wall_s = time.perf_counter() - start
    cpu_s = time.process_time() - start_cpu  # less sensitive than wall time to other work on a shared machine
    return {
        "num_requests": num_requests,
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "simulated_requests_per_s": summary["completed"] / wall_s,
        "first_fifth_cpu_us_per_request": _per_request_us(cpu_at, marks[0], marks[1]),
        "last_fifth_cpu_us_per_request": _per_request_us(cpu_at, marks[4], marks[5]),
        "steps": result.recorder.num_steps,
        "simulated_duration_s": summary["duration_s"],
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux: KiB
    }


def _per_request_us(cpu_at: dict[int, float], first: int, last: int) -> float:
    """CPU microseconds per request finished between two progress marks (nan for runs too short to have them)."""
    if last <= first or first not in cpu_at or last not in cpu_at:
        return float("nan")
    return (cpu_at[last] - cpu_at[first]) / (last - first) * 1e6


def measure_in_subprocess(num_requests: int, steps_to: Path | None) -> dict:
    extra = ["--steps-to", str(steps_to)] if steps_to else []
    command = [sys.executable, "-m", "sim.bench_scale", "--one", str(num_requests), *extra]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size, print JSON
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--steps-to", type=Path, help="write every step row to DIR/steps-N.csv (as --out does)")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.steps_to)))
        return
    mode = (
        f"steps written to {args.steps_to}, as with --out" if args.steps_to else "as `planner simulate` without --out"
    )
    print(f"scenario: {SCENARIO.name} ({mode})")
    print(
        f"{'requests':>10}{'wall s':>9}{'CPU s':>9}{'sim req/s':>11}{'steps':>12}{'peak RSS MB':>13}"
        f"{'CPU us/req 1st 5th':>20}{'last 5th':>10}  verdict"
    )
    for size in args.sizes:
        r = measure_in_subprocess(size, args.steps_to)
        verdicts = []
        if size == 10_000:
            verdicts.append(
                f"wall <= {TARGET_10K_WALL_S:g} s: {'PASS' if r['wall_s'] <= TARGET_10K_WALL_S else 'MISS'}"
            )
        verdicts.append(f"RSS < 1 GB: {'PASS' if r['peak_rss_bytes'] < TARGET_PEAK_RSS_BYTES else 'MISS'}")
        print(
            f"{size:>10,}{r['wall_s']:>9.2f}{r['cpu_s']:>9.2f}{r['simulated_requests_per_s']:>11,.0f}{r['steps']:>12,}"
            f"{r['peak_rss_bytes'] / 1e6:>13,.0f}{r['first_fifth_cpu_us_per_request']:>20,.0f}"
            f"{r['last_fifth_cpu_us_per_request']:>10,.0f}  {'; '.join(verdicts)}"
        )


if __name__ == "__main__":
    main()
