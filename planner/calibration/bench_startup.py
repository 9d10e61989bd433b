"""What loading a shipped calibration adds to `planner simulate`'s start-up (target: < 50 ms).

`python -m planner.calibration.bench_startup [--runs N]`: in N fresh interpreters, after importing what a
simulate run imports anyway (PROBE), times importing the transfer module and one
`public_cost_model` call, for a profiled GPU (reads one profile) and an unprofiled one (reads the transfer
table and its source profiles). Prints the median and the worst run. Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

# Imported before the clock starts: what `planner simulate` imports whatever its cost model (the CLI, the
# scenario loader, the simulator, and the resolver that decides which cost model to use).
PROBE = """
import time, planner.cli, planner.scenario.load, planner.calibration.resolve, sim.driver
from planner.catalog import catalog_gpu
gpu = catalog_gpu({gpu!r})
t0 = time.perf_counter()
from planner.calibration.transfer import public_cost_model
public_cost_model(gpu, "bfloat16", {tp})
print((time.perf_counter() - t0) * 1e3)
"""


def measure(gpu: str, tp: int, runs: int) -> list[float]:
    return [
        float(subprocess.run([sys.executable, "-c", PROBE.format(gpu=gpu, tp=tp)], capture_output=True, text=True,
                             check=True).stdout)
        for _ in range(runs)
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    for gpu, tp in (("a100-80gb", 1), ("h100-sxm", 8), ("l40s", 1), ("mi300x", 2)):
        ms = measure(gpu, tp, args.runs)
        print(f"{gpu} tp{tp}: median {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms over {args.runs} runs")


if __name__ == "__main__":
    main()
