"""`planner validate`: load each scenario (or sizing) file and say whether it can run."""

from __future__ import annotations

import sys
from pathlib import Path

from planner.commands.scenario_checks import run_problems
from planner.errors import EXIT_USAGE, PlannerError, one_line, read_text_file
from sim.errors import WorkloadError


def cmd_validate(args) -> int:
    from planner.scenario.load import load_scenario
    from planner.sizing.spec import load_sizing
    from sim.engine_facts import EngineFacts

    status = 0
    for path in args.files:
        try:  # a sizing file (a scenario + `search:`) validates both parts
            scenario = (
                load_sizing(path, args.overrides).scenario if _has_search(path) else load_scenario(path, args.overrides)
            )
            problems = run_problems(scenario, EngineFacts.of(scenario))
        except (PlannerError, WorkloadError) as e:  # WorkloadError: a trace the workload cannot read
            print(f"planner: error: {one_line(str(e))}", file=sys.stderr)
            status = EXIT_USAGE
            continue
        for problem in problems:
            print(f"planner: error: {one_line(f'{path}: cannot run: {problem}')}", file=sys.stderr)
            status = EXIT_USAGE
        if not problems:
            e = scenario.engine  # the resolved limits: unset ones are what `vllm serve` picks on this GPU
            print(
                f"ok  {path}  ({scenario.model.name} on"
                f" {scenario.hardware.describe() if scenario.fleet is None else scenario.fleet.describe()},"
                f" {scenario.workload.num_requests} requests;"
                f" max_num_batched_tokens {e.max_num_batched_tokens}, max_num_seqs {e.max_num_seqs})"
            )
    return status


def _has_search(path: str) -> bool:
    """Whether a file is a sizing file (a scenario with a top-level `search:` section)."""
    from planner.scenario.load import MAX_SCENARIO_BYTES

    try:
        text = read_text_file(Path(path), "scenario file", MAX_SCENARIO_BYTES)  # no FIFO, no huge file
    except PlannerError:
        return False  # load_scenario reports it
    return any(line.startswith("search:") for line in text.splitlines())
