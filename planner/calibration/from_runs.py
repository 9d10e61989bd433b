"""`planner calibrate --from RUN_DIR ...`: one profile fitted to the steps of `planner run --out` folders (read by
planner/calibration/run_folder.py) with fitting.py's `fit_steps`, the first steps after idle spells priced apart
(wake.py), and, for a speculative run, its drafting terms fitted to its drafting.csv (draft_fit.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np

from planner.calibration.busy import busy_reasons
from planner.calibration.device_gpu import calibration_gpu, measured_gpu, on_measured_gpu
from planner.calibration.draft_fit import drafter_name, drafter_of, fit_drafting, with_drafting, without_drafting
from planner.calibration.fitting import (
    HOST_TERMS,
    device_terms,
    fit_steps,
    measured_scenario,
    predict_rows,
    step_classes,
)
from planner.calibration.profile import Profile, profile_from_fit
from planner.calibration.run_folder import read_arrivals, read_drafting, read_run
from planner.calibration.wake import wake_from_steps, waking_delays, with_wake, woken_steps
from planner.errors import PlannerError
from sim.config import Scenario
from sim.draft_cost import DRAFT_COLUMNS
from sim.engine_facts import EngineFacts

# A least-squares fit of k coefficients to about k rows reproduces them exactly: it reports a near-zero
# error and uncertainty that say nothing about other steps. Several rows per coefficient leave residuals to
# judge the fit by, and each kind of step has to be there several times, since each pins its own terms:
# decode steps (memory-bound) bandwidth_efficiency, steps with prompt tokens (prefill or mixed: compute-bound)
# flops_efficiency.
MIN_ROWS_PER_COEFFICIENT = 5
MIN_ROWS_PER_KIND = 5


def _check_enough_rows(rows: dict[str, np.ndarray], scenario: Scenario, files: list[Path]) -> None:
    """A PlannerError unless the steps are enough to fit every coefficient fit_steps may fit."""
    classes = step_classes(rows)
    decode = int(np.sum(classes == "decode"))
    prompt = len(classes) - decode
    needed = MIN_ROWS_PER_COEFFICIENT * (len(device_terms(scenario)) + len(HOST_TERMS))
    if len(classes) < needed or min(decode, prompt) < MIN_ROWS_PER_KIND:
        names = ", ".join(str(f) for f in files)
        raise PlannerError(
            f"{names}: {len(classes):,} step rows ({decode:,} decode, {prompt:,} with prompt tokens): fitting "
            f"{needed // MIN_ROWS_PER_COEFFICIENT} coefficients needs at least {needed} rows, {MIN_ROWS_PER_KIND} "
            f"of each kind (run more requests: planner run ... --set workload.num_requests=N)"
        )


def fit_from_runs(run_dirs: list[Path], warn: Callable[[str], None] = lambda line: None) -> Profile:
    """One profile fitted to the steps of several `planner run` folders of the same model, dtype and GPU (and
    drafter: a speculative run's target terms are fitted to its steps' verifying forwards, its drafting terms to its
    drafting.csv, as `planner calibrate --device` fits them). `warn` hears of runs measured on a busy CPU (their
    stalled steps are down-weighted by the robust first fit, then count by their time in the refit that makes the
    runs' predicted time their measured time on average; a run that was slow throughout pulls every coefficient)."""
    if not run_dirs:
        raise PlannerError("calibrate --from: give at least one `planner run --out` folder")
    runs = [read_run(Path(d)) for d in run_dirs]
    # the first steps after idle spells, priced apart (the fit's form has none), told from the steps as recorded:
    # a speculative step's span holds its drafting, and taken out it would read as a gap after the step
    woken = np.concatenate([woken_steps(rows) for _, _, rows in runs])
    # ... and priced from the arrival that woke the engine, as a request sees them (wake.py)
    arrivals = [read_arrivals(Path(d)) for d in run_dirs]
    delays = None
    if any(a is None for a in arrivals):
        bare = ", ".join(str(d) for d, a in zip(run_dirs, arrivals) if a is None)
        warn(f"warning: {bare}: no requests.csv: the steps after idle are timed from their start, not from the arrival"
             " that woke the engine (idle_wake_s comes out short by the engine's wait for it)")  # fmt: skip
    else:
        delays = np.concatenate([waking_delays(rows, a) for (_, _, rows), a in zip(runs, arrivals)])
    # a speculative run's steps hold their drafting in device_s: its drafting.csv takes it out (draft_fit.py)
    drafts = [read_drafting(Path(d), rows) if s.engine.speculative else None for (_, s, rows), d in zip(runs, run_dirs)]
    runs = [
        (summary, s, rows if d is None else without_drafting(rows, d)) for (summary, s, rows), d in zip(runs, drafts)
    ]
    for (summary, _, _), run_dir in zip(runs, run_dirs):
        reasons = busy_reasons(summary.get("cpu_share"), summary.get("other_cpu_load"))
        if reasons:
            warn(f"warning: {run_dir}: a busy machine ({'; '.join(reasons)}): its step times include that load")
    summary0, scenario, _ = runs[0]
    key = (scenario.model.name, scenario.dtype, scenario.hardware.gpu.name, summary0.get("device_name"))
    for (summary, other, _), run_dir in zip(runs, run_dirs):
        other_key = (other.model.name, other.dtype, other.hardware.gpu.name, summary.get("device_name"))
        if other_key != key:
            raise PlannerError(
                f"{run_dir}: measured {other_key[0]} ({other_key[1]}) as {other_key[2]} on {other_key[3]}, but "
                f"{run_dirs[0]} measured {key[0]} ({key[1]}) as {key[2]} on {key[3]}: one profile covers one of them"
            )
        if drafter_of(other) != drafter_of(scenario):
            raise PlannerError(
                f"{run_dir}: drafts with {drafter_name(other)}, but {run_dirs[0]} with {drafter_name(scenario)}: one"
                " profile's drafting terms are of one drafter (fit runs of one engine.speculative, or of none)"
            )
    names = runs[0][2].keys()
    rows = {n: np.concatenate([r[2][n] for r in runs]) for n in names if all(n in r[2] for r in runs)}
    if scenario.engine.scheduler == "static":  # `planner run` refuses it now; an older folder may hold one
        raise PlannerError(
            f"{run_dirs[0]}: engine.scheduler static: its steps.csv records the padded batch the simulator prices,"
            " not the rows the live engine computed; fit runs of the continuous scheduler"
        )
    _check_enough_rows(rows, scenario, [Path(d) / "steps.csv" for d in run_dirs])
    kind = "cuda" if summary0.get("device") == "cuda" else "cpu"
    total_bytes = (summary0.get("memory") or {}).get("total_bytes") if kind == "cuda" else None
    where = str(run_dirs[0])
    gpu = measured_gpu(scenario.hardware.gpu.name, kind, summary0.get("device_name"), total_bytes, where)
    scenario = on_measured_gpu(scenario, gpu, warn, where)  # its peaks are what the efficiencies divide
    # `planner run --device cuda` replays decode steps from CUDA graphs (gpu_engine/cuda_graphs.py) unless the
    # run was eager; on CPU there are none.
    graphs = kind == "cuda" and not scenario.engine.enforce_eager
    # A run's steps are timed one by one, each with the machine's noise: the robust first fit keeps a stall from
    # pulling it, the refit makes the predicted time of the runs their measured time on average (a run sums steps)
    fit = fit_steps(
        scenario, {k: v[~woken] for k, v in rows.items()}, robust=True, mean_unbiased=True, cuda_graphs=graphs
    )
    after_idle = {k: v[woken] for k, v in rows.items()}
    price_s = predict_rows(EngineFacts.of(measured_scenario(scenario, graphs)), fit.coefficients, after_idle, True)
    wake = wake_from_steps(after_idle["duration_s"], price_s, delays)
    device = {
        "name": str(summary0.get("device_name") or kind),
        "kind": kind,
        "gpu": calibration_gpu(scenario.hardware.gpu).name,  # the name profiles of this GPU are looked up by
        "memory_bytes": total_bytes,
        "driver": None,
        "runtime": None,
        "torch": None,
    }
    command = "planner calibrate --from " + " ".join(str(d) for d in run_dirs)
    prof = with_wake(
        profile_from_fit(scenario, fit, "live-runs", dataclasses.asdict(scenario.engine), None, command, device), wake
    )
    if scenario.engine.speculative is None:
        return prof
    # the drafting terms, fitted to the runs' timed drafting with the target's held, as `--device` fits them
    rows_drafted = {n: np.concatenate([d[n] for d in drafts]) for n in DRAFT_COLUMNS}
    return with_drafting(prof, fit_drafting(scenario, fit.coefficients, rows_drafted, cuda_graphs=graphs))
