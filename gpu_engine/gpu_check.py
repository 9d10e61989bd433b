"""Everything a first GPU run should do, in one command: `python -m gpu_engine.gpu_check`.

On a machine with an NVIDIA GPU it prints the versions (driver, CUDA, torch, Triton), runs the kernel and
engine tests natively (tests/kernels, the CUDA-graph and parity tests), the kernel sweep
(`python -m planner_kernels.bench --sweep`) and the engine benchmark (`python -m gpu_engine.bench`), then every GPU
target of issue 15 beside its measured figure:
  batch-1 decode step / weights-read floor     <= 1.15x
  decode attention / measured copy bandwidth   >= 80%
  store_kv / measured copy bandwidth           >= 70%
  engine / transformers static generate        >= 3x
  host time per decode step                    (printed beside the step; no target)
and last `planner calibrate --gpu --model llama-3.1-8b` (random weights: timings do not depend on their values),
whose profile and held-out validation (calibration.md) land in --out/calibration/ for committing under
planner/calibrations/ (issue 8), the measured total memory with them.
Outputs (the benchmarks' JSON, the test log) go to --out. Exit status: 0 when every stage ran and every
target was met, 1 when a target was missed or a stage failed, 2 without a CUDA device (nothing measured).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

TESTS = [
    "tests/kernels",
    "tests/test_engine_cuda_graphs.py",
    "tests/test_engine_parity.py",
    "tests/test_engine_model.py",
]


def versions() -> dict[str, str]:
    import triton

    out = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
           "cuda (torch build)": str(torch.version.cuda)}  # fmt: skip
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        out["gpu"] = (
            f"{torch.cuda.get_device_name()} (sm_{major}{minor}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs)"
        )
    smi = shutil.which("nvidia-smi")
    if smi:
        query = ["--query-gpu=driver_version", "--format=csv,noheader"]
        run = subprocess.run([smi, *query], capture_output=True, text=True, check=False)
        out["driver"] = run.stdout.strip().splitlines()[0] if run.returncode == 0 and run.stdout.strip() else "?"
    else:
        out["driver"] = "nvidia-smi not found"
    return out


def targets(kernels: dict | None, engine: dict | None) -> list[tuple[str, str, str, str]]:
    """(target, measured, goal, verdict) rows from planner_kernels.bench's and gpu_engine.bench's JSON figures; a
    figure missing (its stage failed) is a row of its own, never skipped."""
    rows = []

    def row(name: str, value: float | None, goal: str, ok: bool | None, fmt: str) -> None:
        shown = "not measured" if value is None else format(value, fmt)
        rows.append((name, shown, goal, "-" if ok is None else ("met" if ok else "MISSED")))

    decode = engine["decode"] if engine else None
    ratio = decode["ratio"] if decode else None
    row("batch-1 decode step / weights-read floor", ratio, "<= 1.15x", None if ratio is None else ratio <= 1.15, ".2f")
    cases = {(c["case"], c["impl"]): c for c in kernels["cases"]} if kernels else {}
    for case, goal in (("decode attention", 0.80), ("store_kv", 0.70)):
        share = cases.get((case, "triton"), {}).get("copy_share")
        row(f"{case} / copy bandwidth", None if share is None else 100 * share, f">= {goal:.0%}",
            None if share is None else share >= goal, ".0f")  # fmt: skip
    throughput = engine["throughput"]["ratio"] if engine else None
    row(
        "engine / static generate throughput",
        throughput,
        ">= 3x",
        None if throughput is None else throughput >= 3,
        ".2f",
    )
    host = decode["host_ms"] if decode else None
    row("host ms per decode step (of the step's ms)", host, f"< step {decode['step_ms']:.3f} ms" if decode else "-",
        None if host is None else host < decode["step_ms"], ".3f")  # fmt: skip
    return rows


def run_stage(name: str, cmd: list[str], log: Path) -> bool:
    print(f"\n== {name}: {' '.join(cmd)}", flush=True)
    start = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        f.write(proc.stdout)
    tail = proc.stdout.strip().splitlines()[-25:]
    print("\n".join(tail))
    print(f"== {name}: exit {proc.returncode} in {time.perf_counter() - start:.0f} s (log {log})", flush=True)
    return proc.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_engine.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check_out"), help="folder for logs and JSON")
    parser.add_argument("--skip-tests", action="store_true", help="only the benchmarks")
    parser.add_argument("--calibrate-model", default="llama-3.1-8b", help="catalog model for planner calibrate --gpu")
    parser.add_argument("--calibrate-budget-s", type=float, default=180.0, help="its step sweep's budget")
    parser.add_argument("--skip-calibrate", action="store_true", help="leave out planner calibrate --gpu")
    opts = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no GPU: torch sees no CUDA device, so nothing here can be measured (the CPU-side checks are "
              "`pytest` and `python -m gpu_engine.compile_check`)", file=sys.stderr)  # fmt: skip
        return 2
    opts.out.mkdir(parents=True, exist_ok=True)
    print("versions:")
    for key, value in versions().items():
        print(f"  {key:<20}{value}")
    py = sys.executable
    ok = True
    if not opts.skip_tests:
        ok &= run_stage("tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS], opts.out / "tests.log")
    kernels_json, engine_json = opts.out / "kernels.json", opts.out / "engine.json"
    ok &= run_stage("kernel sweep", [py, "-m", "planner_kernels.bench", "--sweep", "--json", str(kernels_json)],
                    opts.out / "kernels.log")  # fmt: skip
    ok &= run_stage("engine bench", [py, "-m", "gpu_engine.bench", "--json", str(engine_json)], opts.out / "engine.log")
    if not opts.skip_calibrate:
        folder = opts.out / "calibration"
        command = [py, "-m", "planner.cli", "calibrate", "--gpu", "--model", opts.calibrate_model, "--budget-s",
                   str(opts.calibrate_budget_s), "--out", str(folder / f"{opts.calibrate_model}-gpu.yaml")]  # fmt: skip
        ok &= run_stage("calibrate", command, opts.out / "calibrate.log")
    kernels = json.loads(kernels_json.read_text()) if kernels_json.exists() else None
    engine = json.loads(engine_json.read_text()) if engine_json.exists() else None
    rows = targets(kernels, engine)
    print(f"\n{'GPU target':<46}{'measured':>14}  {'goal':<22}verdict")
    for name, value, goal, verdict in rows:
        print(f"{name:<46}{value:>14}  {goal:<22}{verdict}")
    met = all(verdict in ("met", "-") for *_, verdict in rows)
    print(f"\nstages {'all ran' if ok else 'FAILED (see logs)'}; targets {'all met' if met else 'not all met'}")
    return 0 if ok and met else 1


if __name__ == "__main__":
    raise SystemExit(main())
