"""The calibration benchmark: `planner calibrate --device cpu` with its defaults, timed, and the issue's CPU
targets it reports (held-out mean TPOT and E2E within 10%, throughput within 10%, mean TTFT within 20%, the
uncalibrated simulator beside; the whole calibration within 2 minutes).

    python -m planner.calibration.bench [--budget-s S]

The profile and its report go to a temporary folder (the user's profile folder is left alone). Figures are
wall-clock on whatever else the machine is doing: say so when quoting them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from planner.cli import main as planner_main

TARGET_S = 120.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m planner.calibration.bench")
    parser.add_argument("--budget-s", type=float, help="the sweep's budget (default: calibrate's)")
    parser.add_argument("--keep", type=Path, help="write the profile and report here instead of a temporary folder")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        os.environ["PLANNER_PROFILE_DIR"] = str(folder)
        command = ["calibrate", "--device", "cpu", "--out", str(folder / "cpu-tiny.yaml")]
        if args.budget_s:
            command += ["--budget-s", str(args.budget_s)]
        load = os.getloadavg()[0]
        started = time.perf_counter()
        status = planner_main(command)
        took_s = time.perf_counter() - started
    verdict = "met" if took_s <= TARGET_S else "MISSED"
    print(
        f"\nplanner {' '.join(command[:3])}: {took_s:.0f} s end to end (target <= {TARGET_S:.0f} s: {verdict});"
        f" 1-minute load average at the start {load:.1f} on {os.cpu_count()} CPUs"
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
