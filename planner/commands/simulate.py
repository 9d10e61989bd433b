"""`planner simulate`: the simulator's prediction of throughput and latency, with optional 90% intervals."""

from __future__ import annotations

from planner.commands.output import check_out, emit, refuse_fleet_scrapes
from planner.commands.scenario_checks import load_scenario_args, refuse, run_problems
from planner.errors import PlannerError
from planner.outputs.progress import ProgressBar


def cmd_simulate(args) -> int:
    from planner.calibration.resolve import resolve_cost_model
    from planner.outputs.plots.workers import plot_workers_for
    from planner.outputs.results import StepsCsv
    from sim.engine_facts import EngineFacts

    scenario = load_scenario_args(args)
    if scenario.fleet is not None:  # several pools behind a router
        from planner.commands.simulate_fleet import simulate_fleet_command

        refuse(scenario, run_problems(scenario, None))
        _check_intervals(args.intervals)
        refuse_fleet_scrapes(args, scenario)
        return simulate_fleet_command(args, scenario)
    facts = EngineFacts.of(scenario)  # derived once: the fit check, the run and its intervals read these
    refuse(scenario, run_problems(scenario, facts))
    _check_intervals(args.intervals)
    if args.all_steps and args.out is None:
        raise PlannerError("--all-steps: it says what steps.csv holds, and only --out DIR writes steps.csv")
    coefficients, provenance = resolve_cost_model(scenario, args.calibration)
    check_out(args)
    num_requests = scenario.workload.num_requests
    plot_workers = plot_workers_for(num_requests, args.out)  # importing while we run
    try:
        steps_csv = None if args.out is None else StepsCsv(args.out / "steps.csv", args.all_steps)  # written as it runs
        _simulate(args, scenario, facts, coefficients, provenance, plot_workers, steps_csv)
    finally:
        if plot_workers is not None:
            plot_workers.close()  # a no-op once they have drawn; else (a failed run) they exit
    return 0


def _check_intervals(runs: int | None) -> None:
    """A 90% interval of one run is that run's figures three times over: it needs a spread (as `planner size`)."""
    from planner.scenario.rules import MAX_INTERVAL_RUNS, MIN_INTERVAL_RUNS

    if runs is not None and not MIN_INTERVAL_RUNS <= runs <= MAX_INTERVAL_RUNS:
        raise PlannerError(
            f"--intervals {runs}: must be a number of runs in [{MIN_INTERVAL_RUNS}, {MAX_INTERVAL_RUNS:,}]"
            " (an interval needs a spread)"
        )


def _simulate(args, scenario, facts, coefficients, provenance, plot_workers, steps_csv) -> None:
    from planner.outputs.results import build_summary
    from sim.driver import simulate

    progress = ProgressBar("simulating", "requests", delay_s=2.0)
    try:
        result = simulate(
            scenario,
            coefficients,
            record_steps=args.out is not None,
            progress=progress,
            steps_sink=steps_csv,
            facts=facts,
        )
    except OSError as e:  # the only file written during the run: a full disk, or the folder removed
        raise PlannerError(f"--out {args.out}: cannot write steps.csv: {e}") from None
    progress.close()
    wl = result.workload
    mean_prompt = float(wl.prompt_tokens.mean()) if len(wl) else 0.0
    summary = build_summary(
        "simulated",
        scenario,
        result.recorder,
        result.memory.to_dict(),
        wl.num_rejected,
        wl.num_truncated,
        {
            "floors": result.cost_model.floors(mean_prompt),
            "cost_model": result.cost_model.coefficients.to_dict(),
            "cost_model_provenance": provenance.to_dict(),
        },
    )
    if result.data_parallel is not None:
        from planner.sizing.dp_serve import other_nodes_note
        from planner.sizing.serve import vllm_serve_command

        serve = [vllm_serve_command(scenario), other_nodes_note(scenario)]
        summary["data_parallel"] = result.data_parallel | {"serve": [line for line in serve if line]}
    extra_lines = []
    if args.intervals:
        from planner.calibration.intervals import interval_lines, simulate_intervals

        progress = ProgressBar(f"{args.intervals} interval runs", "requests", delay_s=2.0)
        summary["intervals"] = simulate_intervals(scenario, facts, coefficients, provenance, args.intervals, progress)
        progress.close()
        extra_lines = interval_lines(summary["intervals"], provenance.label)
    title = f"{scenario.name} (simulated; cost model: {provenance.label})"
    emit(args, summary, result.recorder, title, extra_lines, plot_workers)
