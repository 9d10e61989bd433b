"""The scenario a command names, loaded with its --set overrides, and why it cannot run: checked before any work."""

from __future__ import annotations

from planner.errors import PlannerError


def load_scenario_args(args):
    from planner.scenario import load_scenario

    return load_scenario(args.scenario, args.overrides)


def workload_problems(scenario) -> list[str]:
    from sim.workload import generate_workload

    workload = generate_workload(scenario.workload, scenario.max_model_len)
    if len(workload):
        return []
    return [
        (
            f"all {workload.num_rejected} requests are longer than max_model_len {scenario.max_model_len} and were"
            " rejected; raise engine.max_model_len or set workload.too_long: truncate"
        )
    ]


def run_problems(scenario) -> list[str]:
    """Why the simulated deployment cannot run: it does not fit, or its workload keeps no request."""
    from sim.memory import memory_breakdown
    from sim.memory_fit import fit_problems

    return fit_problems(scenario, memory_breakdown(scenario)) + workload_problems(scenario)


def refuse(scenario, problems: list[str]) -> None:
    if problems:
        raise PlannerError(f"{scenario.source}: cannot run: " + "; ".join(problems))
