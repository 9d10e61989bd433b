"""`planner calibrate`: probe -> sweep -> fit -> profile -> held-out validation, on the engine at hand.

    planner calibrate --device cpu [SCENARIO ...]     (--gpu = --device cuda)
    planner calibrate --from RUN_DIR [RUN_DIR ...]    fit `planner run` folders; no torch needed

Each scenario names the model, dtype and engine settings to calibrate; with none, a built-in default: the
tiny model on CPU (scenarios/cpu_tiny.yaml's), on CUDA the largest catalog model that fits the GPU (or
`--model`). On CPU torch runs one compute thread, for the sweep and the held-out runs alike: on a shared
machine a second thread turns other processes' time slices into stalls of a whole step (measured: 20 ms to
1.4 s for a decode step of the tiny model with two threads, 3-25 ms with one, under the same load).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from planner.calibration.calibrate import (
    calibrate_scenario,
    check_profile_path,
    check_writable,
    engine_modules,
    file_name,
    profile_path,
    say,
    writing,
)
from planner.calibration.defaults import DEFAULT_BUDGET_S, DEFAULT_HELD_OUT_REQUESTS, default_scenario
from planner.calibration.draft_fit import DRAFTING
from planner.errors import PlannerError


def cmd_calibrate(args) -> int:
    """The `calibrate` subcommand (planner.cli wires it)."""
    if args.from_vllm:
        given = args.from_runs or args.gpu or args.device or args.scenarios or args.model
        if given or args.budget_s is not None or args.held_out_requests is not None:
            raise PlannerError("--from-vllm fits vLLM's files: give it no --from/--gpu/--device/--model/--budget-s/"
                               "--held-out-requests, and the scenario as --scenario SCENARIO")  # fmt: skip
        from planner.calibration.from_vllm import cmd_from_vllm

        return cmd_from_vllm(args)
    if args.scenario or args.overrides:
        raise PlannerError("--scenario and --set go with --from-vllm (calibrate names its scenarios without a flag)")
    if args.from_runs:
        if args.gpu or args.device or args.scenarios or args.model:
            raise PlannerError("--from fits existing runs: give it no --gpu/--device, scenario or --model")
        return _from_runs(args)
    device = "cuda" if args.gpu else args.device
    if device is None:
        raise PlannerError("say what to calibrate: --device cpu, --gpu (= --device cuda), or --from RUN_DIR ...")
    if args.gpu and args.device not in (None, "cuda"):
        raise PlannerError(f"--gpu means --device cuda; it contradicts --device {args.device}")
    if args.budget_s is not None and not (math.isfinite(args.budget_s) and args.budget_s > 0):
        raise PlannerError(f"--budget-s {args.budget_s}: must be a finite positive number of seconds")
    if args.held_out_requests is not None and args.held_out_requests < 4:
        raise PlannerError(f"--held-out-requests {args.held_out_requests}: must be at least 4")
    if args.out and len(args.scenarios) > 1:
        raise PlannerError(f"--out {args.out}: names one profile file, but {len(args.scenarios)} scenarios were given")
    resolved = [Path(p).resolve() for p in args.scenarios]
    twice = sorted({str(p) for p, r in zip(args.scenarios, resolved) if resolved.count(r) > 1})
    if twice:  # two calibrations of one scenario would halve each one's budget and write one profile twice
        raise PlannerError(f"{twice[0]}: given twice; name each scenario once")
    if args.out and args.out.exists() and args.out.is_dir():
        raise PlannerError(f"--out {args.out}: is a folder; give the profile's file name (e.g. {args.out}/tiny.yaml)")
    torch = engine_modules()[0]
    if device == "cuda" and not torch.cuda.is_available():
        raise PlannerError("--device cuda: no CUDA device is visible to torch (use --device cpu)")
    scenarios = [_on_this_device(path, device) for path in args.scenarios] or [default_scenario(device, args.model)]
    if args.model and args.scenarios:
        raise PlannerError("--model picks the built-in default's model; a scenario names its own model")
    paths = [profile_path(scenario, device, args.out) for scenario in scenarios]
    for path in paths:
        check_profile_path(path, _label(args.out))
    budget_s = (args.budget_s or DEFAULT_BUDGET_S[device]) / len(scenarios)
    held_out = args.held_out_requests or DEFAULT_HELD_OUT_REQUESTS[device]
    from gpu_engine.engine import CPU_THREADS

    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(CPU_THREADS)
    try:
        for scenario, path in zip(scenarios, paths, strict=True):
            calibrate_scenario(scenario, device, budget_s, path, held_out)
    finally:
        torch.set_num_threads(threads)
    return 0


def _on_this_device(path, device: str):
    """The scenario, its hardware.gpu the device at hand (planner.calibration.device_gpu): loaded again with it,
    so that the limits vLLM picks by GPU are this one's."""
    from planner.calibration.device_gpu import measured_gpu
    from planner.calibration.profile import this_device
    from planner.scenario.load import load_scenario

    scenario = load_scenario(path)
    here = this_device(scenario, device)
    gpu = measured_gpu(scenario.hardware.gpu.name, here["kind"], here["name"], here["memory_bytes"], str(path))
    if gpu == scenario.hardware.gpu.name:
        return scenario
    say(f"{path}: hardware.gpu {scenario.hardware.gpu.name} -> {gpu}: the profile is of the device measured")
    return load_scenario(path, (f"hardware.gpu={gpu}",))


def _from_runs(args) -> int:
    from planner.calibration import from_runs, profile

    started = time.perf_counter()
    prof = from_runs.fit_from_runs(args.from_runs, warn=say)  # seconds: the default name needs the fit
    path = args.out or profile.default_profile_dir() / f"{file_name(prof.model)}-{prof.dtype}-runs-{prof.id}.yaml"
    check_writable(path, _label(args.out))  # what refuses the write, said clearly; `writing`: a failure during it
    with writing(path):
        saved = profile.save_profile(prof, path)
    say(*profile_lines(prof), f"wrote the profile {saved} in {time.perf_counter() - started:.1f} s")
    return 0


def _label(out) -> str:
    """How a message names where the profile goes."""
    return f"--out {out}" if out else "the profile's default place (give --out, or set PLANNER_PROFILE_DIR)"


def profile_lines(prof) -> list[str]:
    fit = prof.fit or {}
    lines = [f"Profile {prof.id}: {prof.model} ({prof.dtype}) on {prof.device.get('name')}, source {prof.source}"]
    for name, v in prof.coefficients.items():
        std = prof.uncertainty.get(name)
        lines.append(f"  {name:<30}{v:>12.4g}" + ("" if std is None else f"  ± {std:.2g}"))
    if fit:
        lines.append(
            f"  {fit.get('rows', 0)} steps: median |error| {fit.get('median_abs_error', float('nan')) * 100:.1f}%,"
            f" p90 {fit.get('p90_abs_error', float('nan')) * 100:.1f}%"
        )
    drafting = (fit.get("by_class") or {}).get(DRAFTING)
    if drafting:  # speculative decoding's drafting terms' own steps (planner/calibration/draft_fit.py)
        lines.append(
            f"  {drafting['rows']} drafting steps: median |error| {drafting['median'] * 100:.1f}%,"
            f" p90 {drafting['p90'] * 100:.1f}%"
        )
    return lines
