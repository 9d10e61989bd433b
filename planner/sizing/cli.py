"""`planner size`: load the sizing file, run the search with a progress bar, print, write the report."""

from __future__ import annotations

import json
import shlex
import sys

from planner.errors import PlannerError
from planner.outputs.progress import ProgressBar
from planner.scenario.rules import MAX_INTERVAL_RUNS, MIN_INTERVAL_RUNS
from planner.sizing.executor import WORKERS_PER_CPU, max_workers
from planner.sizing.rank import rank
from planner.sizing.report.data import sizing_data
from planner.sizing.report.tables import terminal_lines
from planner.sizing.search import run_search
from planner.sizing.spec import load_sizing


def command_line(args) -> str:
    parts = ["planner", "size", args.scenario, *(f"--set {o}" for o in args.overrides)]
    if args.intervals:
        parts += ["--intervals", str(args.intervals)]
    if args.out:
        parts += ["--out", str(args.out)]
    return " ".join(shlex.quote(p) if " " in p and not p.startswith("--set") else p for p in parts)


def run_size(args) -> int:
    if args.workers is not None and not 1 <= args.workers <= max_workers():
        raise PlannerError(
            f"--workers {args.workers}: must be in [1, {max_workers():,}] (at most {WORKERS_PER_CPU} per CPU of"
            " this machine: more processes only wait for the cores)"
        )
    if args.intervals is not None and not MIN_INTERVAL_RUNS <= args.intervals <= MAX_INTERVAL_RUNS:
        raise PlannerError(
            f"--intervals {args.intervals}: must be a number of runs in [{MIN_INTERVAL_RUNS}, {MAX_INTERVAL_RUNS:,}]"
            " (an interval needs a spread)"
        )
    question = load_sizing(args.scenario, args.overrides)
    if args.out:
        from planner.sizing.report.files import check_report_dir

        check_report_dir(args.out)
    progress = ProgressBar("sizing", "candidates", delay_s=1.0)
    try:
        out = run_search(question, args.workers, args.ray, progress)
    finally:
        progress.close()
    ranking = rank(out)
    if args.intervals:
        from planner.sizing.intervals import run_intervals

        progress = ProgressBar("sizing", "interval draws", delay_s=1.0)
        try:
            run_intervals(out, ranking, args.intervals, args.workers, args.ray, progress)
        finally:
            progress.close()
    topologies = _compare_topologies(question, out, ranking, args)
    from planner.sizing.report.speculation import speculation_crossover

    crossover = speculation_crossover(out, ranking)  # None unless the search swept speculation on and off
    data = sizing_data(out, ranking)
    if crossover is not None:
        data["speculation_crossover"] = crossover.to_dict()
    if topologies is not None:
        from planner.sizing.report.topology import topology_data

        data["disaggregated"] = topology_data(topologies, ranking)
    if args.out:
        from planner.sizing.report.files import write_report

        written = write_report(args.out, out, ranking, command_line(args), data, topologies, crossover)
    if args.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        lines = terminal_lines(out, ranking)
        if topologies is not None:
            from planner.sizing.report.topology import topology_lines

            lines[-2:-2] = ["", *topology_lines(topologies, ranking, question.search.demand.unit)]
        if crossover is not None:
            lines[-2:-2] = ["", *crossover.lines()]
        print("\n".join(lines))
        if args.out:
            print(f"\nwrote {', '.join(p.name for p in written)} to {args.out}")
    if ranking.recommended is None and (topologies is None or topologies.best is None):
        # the report says how close each came; the exit status says it failed
        closest = f" (closest: {data['closest']})" if data.get("closest") else ""
        raise PlannerError(
            f"{question.source}: no candidate meets the SLOs at the demand{closest}; see how close each came above"
        )
    return 0


def _compare_topologies(question, out, ranking, args):
    """`search.disaggregated`, `search.length_routed`: units of two pools sized for the same demand
    (planner/sizing/topology.py)."""
    if question.search.disaggregated is None and question.search.length_routed is None:
        return None
    from planner.sizing.topology import compare_topologies

    best = ranking.recommended
    cheapest = None if best is None else best.objective_usd_per_month
    progress = ProgressBar("sizing", "units of two pools", delay_s=1.0)
    try:
        comparison = compare_topologies(question, cheapest, args.workers or out.workers, args.ray, progress)
    finally:
        progress.close()
    if args.intervals:
        from planner.sizing.unit_intervals import run_unit_intervals

        progress = ProgressBar("sizing", "unit interval draws", delay_s=1.0)
        try:
            run_unit_intervals(comparison, question, args.intervals, args.workers or out.workers, args.ray, progress)
        finally:
            progress.close()
    return comparison
