"""`planner run`: the scenario on the live engine (the engine extra), measured and summarised like a simulation."""

from __future__ import annotations

import math
import sys

from planner.commands.output import check_out, emit, refuse_fleet_scrapes
from planner.commands.scenario_checks import load_scenario_args, refuse, workload_problems
from planner.errors import PlannerError, ScenarioError
from planner.outputs.progress import ProgressBar

# Below it logits / temperature overflows float32 (inf, then nan probabilities); vLLM raises a lower one to it.
MIN_TEMPERATURE = 0.01


def _check_sampling(temperature: float, top_p: float) -> None:
    """Before the model loads. nan passes no comparison, so each check says what passes; an infinite
    temperature would sample uniformly, whatever the model says."""
    if temperature != 0 and not (math.isfinite(temperature) and temperature >= MIN_TEMPERATURE):
        raise PlannerError(f"--temperature {temperature}: must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE}")
    if not 0 < top_p <= 1:
        raise PlannerError(f"--top-p {top_p}: must be a number in (0, 1]")
    if top_p < 1 and temperature == 0:  # greedy decoding takes the likeliest token: top-p would change nothing
        raise PlannerError(f"--top-p {top_p}: only with --temperature > 0 (at 0, greedy, it would be ignored)")


SERIAL_NOTE = (
    "Steps: this engine runs them serially; `planner simulate` of this scenario overlaps host and device as vLLM's"
    " async scheduling does: compare this run with a simulation under --set engine.enforce_eager=true"
)


def cmd_run(args) -> int:
    try:
        from gpu_engine.engine import EngineError, run_scenario
        from gpu_engine.runner import SamplingParams
    except ImportError as e:
        raise PlannerError(f"the live engine needs the engine extra (pip install 'planner[engine]'): {e}") from e
    from planner.outputs.results import build_summary

    _check_sampling(args.temperature, args.top_p)
    scenario = load_scenario_args(args)
    refuse(scenario, workload_problems(scenario))  # the fit is measured by the engine itself
    if scenario.engine.enable_dbo:
        raise ScenarioError(
            scenario.source, "engine.enable_dbo", True,
            "the live data-parallel group runs each rank's forward whole, one rank after another in one"
            " process, so there is no all-to-all on a link for a second micro-batch to hide; dual-batch"
            " overlap is simulated only (planner simulate); set it false to run the group live",
        )  # fmt: skip
    check_out(args)
    if scenario.fleet is not None:  # a prefill/decode pair (gpu_engine/pd_pair.py)
        from planner.commands.simulate_fleet import run_pair_command

        refuse_fleet_scrapes(args, scenario)
        return run_pair_command(args, scenario, SamplingParams(args.temperature, args.top_p))
    progress = ProgressBar(f"running on {args.device}", "requests", delay_s=2.0)
    try:
        sampling = SamplingParams(args.temperature, args.top_p)
        if scenario.hardware.data_parallel_size > 1:  # N ranks in one process (gpu_engine/data_parallel.py)
            from gpu_engine.data_parallel import run_data_parallel

            if args.model_path is not None:
                raise PlannerError(
                    f"--model-path {args.model_path}: the live data-parallel group runs seeded random weights;"
                    " leave it out (timings do not depend on weight values)"
                )

            result = run_data_parallel(scenario, args.device, sampling, progress)
        else:
            result = run_scenario(scenario, args.device, args.model_path, sampling, progress)
    except EngineError as e:
        raise PlannerError(str(e)) from e
    finally:
        progress.close()
    wl = result.workload
    summary = build_summary(
        "measured", scenario, result.recorder, result.memory, wl.num_rejected, wl.num_truncated, result.extra
    )
    from sim.engine_facts import EngineFacts

    # The same scenario simulated overlaps each step's host work with the device's (vLLM's async scheduling):
    # beside this run, that difference would read as the cost model's error.
    serial = [] if EngineFacts.of(scenario).serial else [SERIAL_NOTE]
    title = f"{scenario.name} (measured on {result.extra['device_name']})"
    emit(args, summary, result.recorder, title, serial, drafts=result.drafts)
    from planner.calibration.busy import busy_reasons

    reasons = busy_reasons(result.extra.get("cpu_share"), result.extra.get("other_cpu_load"))
    if reasons:
        print(
            f"planner: warning: a busy machine ({'; '.join(reasons)}): a CPU engine's steps slow down then, so"
            " these latencies measure the load too (run it again on a quieter machine to measure the engine)",
            file=sys.stderr,
        )
    return 0
