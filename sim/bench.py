"""The simulator's speed benchmark: `python -m sim.bench [--baseline REV]`.

Whole process, start-up included, as a user runs it: `planner simulate
scenarios/a100_llama2_7b_azure_10k.yaml --json` (10,000 requests with the Azure conversation trace's token
counts, Poisson arrivals, Llama-2-7B on one A100-80GB, continuous batching) at 2 req/s and at 8 req/s
(saturated, with preemptions), the first with `--out DIR` (every output file and plot), and the import of
the CLI. Targets: <= 0.5 s at 2 req/s, <= 1 s at 8 req/s, import <= 150 ms; what `--out` adds to its run is
printed without one (docs/speed.md, "What --out costs"). It prints the start-up floor too: the least whole process that only imports what the simulate path
cannot do without (numpy, SimPy, PyYAML), and what that leaves of the 0.5 s target.

The machine is shared and timings are noisy: each figure is the minimum of --runs runs (the least
disturbed one), in wall seconds and in CPU seconds (user + system, which a busy machine inflates less). With
--baseline REV the same commands run from an export of REV (`git archive`, in a temp dir) alternately with
this tree's, so both see the same load, and the ratio of the minima is printed. Both trees' modules are
compiled to bytecode first, as an install or a first run leaves them: where PYTHONDONTWRITEBYTECODE is set
(as on this repository's machines) every run would otherwise compile them again, ~0.1 s.

It also checks that both trees print the same summary JSON for every shipped scenario (the trees' own paths
aside): a speed-up must not change a simulated result beyond float rounding, a relative SAME_REL (what the
fast paths' property tests allow against stepping one by one: sums taken in another order differ in their
last bits). This is a benchmark, not a test: it prints figures and verdicts and fails only when the results
differ.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = "scenarios/a100_llama2_7b_azure_10k.yaml"
CASES = {  # name -> (planner arguments, target whole-process seconds)
    "10k @ 2 req/s": (["simulate", SCENARIO, "--json"], 0.5),
    "10k @ 8 req/s": (["simulate", SCENARIO, "--json", "--set", "workload.arrival.rate=8"], 1.0),
}
TARGET_IMPORT_S = 0.150
# --out (summary.json, requests.csv, steps.csv and the three plots) on the first case: what it adds to that run.
OUT_CASE = "10k @ 2 req/s --out"
# What no simulator can beat in a whole process: the interpreter and the imports the simulate path cannot do
# without (numpy for the workload and the windows, SimPy for the clock, PyYAML for the scenario).
FLOOR_IMPORTS = "import numpy, simpy, yaml"
SAME_REL = 1e-9  # two summaries' floats that differ by less are the same result


def _run_s(command: list[str], tree: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of the whole process, run from tree (its code first on sys.path). CPU
    (user + system) suffers less than wall time from a busy machine: both are printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall_s, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _planner(tree: Path, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "planner.cli", *args]


def _import_s(tree: Path) -> tuple[float, float]:
    """The CLI's import: `import planner.cli` timed inside the process (wall, CPU). Not a whole process less a
    bare interpreter's: at ~10 ms, that difference of two noisy runs came out negative."""
    measure = (
        "import time; wall, cpu = time.perf_counter(), time.process_time(); import planner.cli; "
        "print(time.perf_counter() - wall, time.process_time() - cpu)"
    )
    out = subprocess.run([sys.executable, "-c", measure], cwd=tree, check=True, capture_output=True, text=True)
    wall_s, cpu_s = out.stdout.split()
    return float(wall_s), float(cpu_s)


def start_up_floor_s(runs: int) -> tuple[float, float]:
    """(wall s, the 10k @ 2 req/s target less it): the least of `runs` whole processes that only import what
    `planner simulate` cannot run without (FLOOR_IMPORTS), and what of the target is left for 10,000 requests."""
    command = [sys.executable, "-c", FLOOR_IMPORTS]
    floor_s = min(_run_s(command, ROOT)[0] for _ in range(runs))
    return floor_s, CASES["10k @ 2 req/s"][1] - floor_s


def export(rev: str, into: Path) -> Path:
    """The tree of REV, without touching this checkout (no worktree, no stash)."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def compile_bytecode(tree: Path) -> None:
    """Compile the tree's packages to bytecode (__pycache__, ignored by git), as an install does."""
    packages = [name for name in ("planner", "sim") if (tree / name).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], cwd=tree, check=True)


def _differs(a, b) -> bool:
    """Two summary values are different results: floats beyond SAME_REL (NaN equals NaN), anything else unequal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() != b.keys() or any(_differs(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return not (math.isclose(a, b, rel_tol=SAME_REL, abs_tol=0.0) or (math.isnan(a) and math.isnan(b)))
    return a != b


def summary_differences(trees: list[Path], scenario: str, extra: list[str]) -> tuple[list[str], bool]:
    """What differs between the two trees' answers for scenario, and whether they are identical: nothing ([])
    when both print the same summary JSON but for float rounding (_differs), or the same refusal (a sizing
    file in scenarios/ is not a simulate scenario), each tree's own path written as <tree>; else the summary
    keys whose values differ, "the printing" when the same values print differently, or "the run" when one
    tree cannot run what the other runs (e.g. a baseline older than the scenario file)."""
    answers = []
    for tree in trees:
        done = subprocess.run(
            _planner(tree, ["simulate", scenario, "--json", *extra]), cwd=tree, capture_output=True, check=False
        )
        printed = (done.stdout.decode(), done.stderr.decode() if done.returncode else "")
        answers.append((done.returncode, *(text.replace(str(tree), "<tree>") for text in printed)))
    if answers[0] == answers[1]:
        return [], True
    if answers[0][0] or answers[1][0]:
        return ["the run"], False
    a, b = json.loads(answers[0][1]), json.loads(answers[1][1])
    differ = [key for key in a.keys() | b.keys() if key not in a or key not in b or _differs(a[key], b[key])]
    if not differ and a == b:  # the same values printed differently
        differ = ["the printing"]
    return differ, False


def peak_rss_bytes(tree: Path, num_requests: int) -> int:
    """Peak RSS of `planner simulate` over num_requests of the benchmark scenario, in a fresh process."""
    measure = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    command = _planner(tree, ["simulate", SCENARIO, "--json", "--set", f"workload.num_requests={num_requests}"])
    out = subprocess.run([sys.executable, "-c", measure, *command], cwd=tree, check=True, capture_output=True)
    return int(out.stdout) * 1024  # Linux: KiB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV", help="also time REV (e.g. HEAD~1), alternating with this tree")
    parser.add_argument("--runs", type=int, default=3, help="runs of each command; the minimum is kept")
    parser.add_argument("--rss", action="store_true", help="also the peak RSS at 100,000 requests (minutes)")
    parser.add_argument("--no-check", action="store_true", help="skip the same-results check over the scenarios")
    parser.add_argument("--check-only", action="store_true", help="only the same-results check (with --baseline)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sim-bench-") as tmp:
        trees = {"this tree": ROOT}
        if args.baseline:
            trees[args.baseline] = export(args.baseline, Path(tmp))
        for tree in trees.values():
            compile_bytecode(tree)
        print(f"whole process, min of {args.runs} runs (shared machine: noisy; runs alternate between trees)")
        names = list(trees)
        header = f"{'':<20}" + "".join(f"{name + ' ' + kind:>20}" for name in names for kind in ("wall", "cpu"))
        print(header + ("  ratio wall   cpu" if args.baseline else "") + "  target (wall)")
        out_args = (["simulate", SCENARIO, "--out", str(Path(tmp) / "out")], None)  # the first case, with --out
        rows = {} if args.check_only else {"import planner.cli": ([], TARGET_IMPORT_S)} | CASES | {OUT_CASE: out_args}
        wall_s = {}
        for label, (planner_args, target_s) in rows.items():
            best = {name: [float("inf"), float("inf")] for name in names}
            for _ in range(args.runs):
                for name, tree in trees.items():
                    if planner_args:
                        figures = _run_s(_planner(tree, planner_args), tree)
                    else:
                        figures = _import_s(tree)
                    best[name] = [min(b, f) for b, f in zip(best[name], figures)]
            wall_s[label] = best[names[0]][0]
            line = f"{label:<20}" + "".join(f"{best[name][k]:>19.3f}s" for name in names for k in (0, 1))
            if args.baseline:
                ratios = [best[names[0]][k] / best[names[1]][k] for k in (0, 1)]
                line += f"{ratios[0]:>12.2f}{ratios[1]:>6.2f}"
            if target_s is None:  # --out: against the same run without it, in this tree
                adds = wall_s[label] / wall_s["10k @ 2 req/s"] - 1
                print(f"{line}  adds {adds:.0%} (no target)")
            else:
                verdict = "PASS" if wall_s[label] <= target_s else "MISS"
                print(f"{line}  <= {target_s:g} s: {verdict}")
        if not args.check_only:
            floor_s, left_s = start_up_floor_s(args.runs)
            print(
                f"start-up floor: `python -c '{FLOOR_IMPORTS}'` {floor_s:.3f}s wall (min of {args.runs}): the"
                f" 10k @ 2 req/s target leaves {left_s * 1e3:.0f} ms, {left_s / 1e4 * 1e6:.1f} us a request"
            )
        if args.rss:
            line = f"{'100k peak RSS':<16}" + "".join(
                f"{peak_rss_bytes(t, 100_000) / 1e6:>12.0f}MB" for t in trees.values()
            )
            print(f"{line}  < 1 GB (the hardening issue)")
        if not args.baseline or args.no_check:
            return 0
        scenarios = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scenarios").glob("*.yaml"))
        checks = [(s, []) for s in scenarios] + [(SCENARIO, ["--set", "workload.arrival.rate=8"])]
        differ, num_identical = [], 0
        for scenario, extra in checks:
            keys, identical = summary_differences(list(trees.values()), scenario, extra)
            num_identical += identical
            if keys:
                differ.append(f"{scenario} {' '.join(extra)}: {', '.join(sorted(keys))}")
        num_same = len(checks) - len(differ)
        print(
            f"summary JSON the same as {args.baseline} on {num_same}/{len(checks)} runs "
            f"({num_identical} byte for byte, {num_same - num_identical} within a relative {SAME_REL:g})"
        )
        for case in differ:
            print(f"  DIFFERS: {case}")
        return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
