"""`planner calibrate --from-vllm FILE ... --scenario S [--out PROFILE]`: fit the simulator to a vLLM server's own
files (docs/calibration-from-vllm.md).

1. read the files (planner/vllm_files/inputs.py): bench-serve results, Prometheus scrapes; the engine facts the
   scrapes carry replace the scenario's (block_size, the KV pool's blocks) and are printed;
2. rebuild each result's workload (planner.calibration.vllm_replay) and hold part out: with several result
   files the last one, with one the requests sent in its last HELD_OUT_SHARE; a scrape window that counted a
   fitted file's requests adds its queue, prefill and decode histograms. Without a result file, each window of
   the scrapes is rebuilt instead and the last held out (planner.calibration.from_scrapes);
3. fit through the simulator (planner.calibration.vllm_fit) and print each coefficient with its standard error,
   the statistic that pins it (and the kinds of observation it is pinned by), and those the files cannot pin;
4. print the held-out error table as `planner calibrate` does (planner.calibration.validation_report), and write
   the profile (source vllm-metrics) that `planner simulate --calibration` and `planner size` read.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np

from planner.calibration.calibrate import check_writable, file_name, say, writing
from planner.calibration.from_scrapes import held_out_window, scrape_replays, with_phases
from planner.calibration.gauge_check import gauge_lines
from planner.calibration.validate import HeldOutRun
from planner.calibration.vllm_fit import DIFF_STEP, Replay, VllmFit, fit_replays, simulate_replay
from planner.calibration.vllm_replay import Latencies, growing_ttft, observed, replay_scenario, simulated
from planner.errors import PlannerError
from planner.vllm_files import names
from sim.cost_coefficients import CostCoefficients
from sim.engine_facts import EngineFacts

HELD_OUT_SHARE = 0.3  # one result file: the requests sent last, this share of them, are held out
MIN_FIT_REQUESTS = 20  # quantiles of fewer requests say little
MISFIT = 0.1  # a median |error| of the matched statistics above this is said to be a misfit


def cmd_from_vllm(args) -> int:
    from planner.calibration.resolve import resolve_cost_model
    from planner.scenario.load import load_scenario
    from planner.vllm_files.inputs import read_inputs

    if args.scenario is None:
        raise PlannerError(
            "--from-vllm needs --scenario SCENARIO: vLLM's files name the model, not the GPU, dtype, tensor parallel"
            " size or engine settings the simulator needs"
        )
    started = time.perf_counter()
    if args.out is not None:
        check_writable(args.out, f"--out {args.out}")  # before the fit, not after it
    scenario = load_scenario(args.scenario, args.overrides)
    if scenario.fleet is not None:
        raise PlannerError(f"{args.scenario}: fleet: --from-vllm fits one engine; give a scenario of one pool")
    inputs = read_inputs(list(args.from_vllm), scenario.model)
    start, provenance = resolve_cost_model(scenario)
    with tempfile.TemporaryDirectory(prefix="planner-vllm-") as folder:
        if inputs.bench:
            replays, held, lines = _replays(scenario, inputs, Path(folder))
        else:  # scrapes alone: planner.calibration.from_scrapes
            replays, held, lines = scrape_replays(scenario, inputs, Path(folder))
        say(*lines, f"Starting coefficients: {provenance.label}")
        fit = fit_replays(replays, start)
        say(*fit_lines(fit))
        if inputs.bench:
            runs = [_held_out(replay, mask, fit.coefficients, inputs) for replay, mask in held]
        else:
            runs = [held_out_window(window, replays[-1], fit.coefficients, inputs) for window in held]
            say(*gauge_lines([*replays, *held], fit.coefficients))
    from planner.calibration.validation_report import report_lines

    device = "cpu" if scenario.hardware.gpu.name == "cpu" else "cuda"
    if runs:
        say(*report_lines(runs, device))
    prof = _profile(scenario, replays[0].scenario.engine, fit, inputs, args.from_vllm)
    from planner.calibration.profile import default_profile_dir, save_profile

    path = args.out or default_profile_dir() / f"{file_name(prof.model)}-{prof.dtype}-vllm-{prof.id}.yaml"
    check_writable(path, f"--out {args.out}" if args.out else "the profile's default place")
    with writing(path):
        saved = save_profile(prof, path)
    say(f"wrote the profile {saved} in {time.perf_counter() - started:.1f} s")
    return 0


def _replays(scenario, inputs, folder: Path) -> tuple[list[Replay], list[tuple[Replay, np.ndarray]], list[str]]:
    """The fitted replays, the held-out ones (with their held-out requests) and the lines saying what was read."""
    lines = ["Read:"]
    replays = []
    for i, run in enumerate(inputs.bench):
        replay, said = replay_scenario(scenario, run, folder / f"{i}.csv", inputs.engine)
        failed = f", {run.num_failed} failed left out" if run.num_failed else ""
        backend = f" (backend {run.backend})" if run.backend else ""
        lines.append(f"  {run.path}{backend}: {len(run):,} requests{failed} over {run.span_s:.1f} s; {said}")
        everything = np.ones(len(run), dtype=bool)
        replays.append(Replay(run.path.name, replay, EngineFacts.of(replay), observed(run), everything))
    for scrape in inputs.windows:
        lines += window_lines(scrape)
    lines += ["Engine facts from the files (they replace the scenario's):", *(inputs.facts or ["  none"])]
    engine = replays[0].scenario.engine
    lines.append(f"  max_num_seqs = {engine.max_num_seqs} (the scenario's: vLLM's files do not carry it)")
    if len(replays) > 1:
        fitted, said = with_phases(replays[:-1], replays[-1:], inputs.windows)
        return fitted, [(replays[-1], replays[-1].fit_mask)], lines + said
    only = replays[0]
    cut = int(np.ceil(len(only.fit_mask) * (1 - HELD_OUT_SHARE)))
    if cut < MIN_FIT_REQUESTS:
        raise PlannerError(
            f"{inputs.bench[0].path}: {len(only.fit_mask)} requests: holding out {HELD_OUT_SHARE:.0%} leaves {cut};"
            f" the fit needs at least {MIN_FIT_REQUESTS} (give a longer run, or a second file to hold out)"
        )
    fit_mask = np.arange(len(only.fit_mask)) < cut
    lines.append(
        f"Held out: the last {len(only.fit_mask) - cut} of {len(only.fit_mask)} requests sent (fit on the first {cut})"
    )
    fitted = dataclasses.replace(only, fit_mask=fit_mask)
    _, said = with_phases([fitted], [only], inputs.windows)  # a window counts the held-out requests too
    return [fitted], [(only, ~fit_mask)], lines + said


def window_lines(scrape) -> list[str]:
    """A scrape's (or window's) requests and mean times per request phase (matched with a bench file whose
    requests it counted: from_scrapes.with_phases)."""
    e2e = scrape.histogram(names.E2E)
    line = f"  {scrape.path}: Prometheus, {0 if e2e is None else int(e2e.count):,} requests finished"
    means = []
    for label, name in (("queue", names.QUEUE), ("prefill", names.PREFILL), ("decode", names.DECODE),
                        ("TTFT", names.TTFT), ("E2E", names.E2E)):  # fmt: skip
        h = scrape.histogram(name)
        if h is not None and h.mean() is not None:
            means.append(f"{label} {h.mean() * 1e3:,.1f}")
    return [line + (f"; mean ms per request: {', '.join(means)}" if means else "")]


def fit_lines(fit: VllmFit) -> list[str]:
    method = f"scipy least_squares, trust-region reflective, {DIFF_STEP:.0%} finite differences"
    counts = f"{len(fit.labels)} statistics, {fit.num_simulations} simulations"
    lines = [f"Fit through the simulator ({method}): {counts}"]
    if fit.speed != 1.0:
        lines.append(f"  first, every starting time x {fit.speed:.3g}: the one factor that matches the files best")
    if fit.result is not None:
        for name, value in zip(fit.result.names, fit.result.values):
            std = fit.uncertainty.get(name)
            shown = f"+- {std:.2g}" if std is not None else "+- inf"
            bound = "  AT BOUND: the form does not fit" if name in fit.result.at_bound else ""
            lines.append(f"  {name:<30}{value:>12.4g}  {shown:<10} pinned by {fit.pinned_by[name]}{bound}")
        errors = np.abs(fit.result.relative_errors)
        lines.append(f"  statistics: median |error| {np.median(errors):.1%}, worst {errors.max():.1%}")
        if np.median(errors) > MISFIT:
            lines.append(
                f"  MISFIT: the simulator does not reproduce these files (median |error| above {MISFIT:.0%}): a"
                " busy or unsteady machine under the server, or a workload the replay does not rebuild (shared"
                " prefixes, another max_num_seqs); read the coefficients and the held-out table with that in mind"
            )
    lines += [f"  not pinned: {name}: {why}" for name, why in fit.not_pinned.items()]
    return lines


def _summary(lat: Latencies, mask: np.ndarray, num_gpu_blocks: int | None) -> dict:
    """The figures the held-out table compares, of the masked requests (what bench serve reports)."""
    series = {"ttft": lat.ttft_s[mask], "tpot": lat.tpot_s(mask), "e2el": lat.e2e_s[mask]}
    arrival = lat.arrival_s[mask]
    span = float(np.max(arrival + lat.e2e_s[mask]) - np.min(arrival))
    known = np.isfinite(span) and span > 0
    out = {
        "request_throughput": int(mask.sum()) / span if known else None,
        "output_throughput": float(lat.output_tokens[mask].sum()) / span if known else None,
        "memory": {"num_gpu_blocks": num_gpu_blocks},
        "peak_memory_bytes": None,
    }
    for key, values in series.items():
        ms = values * 1e3
        for stat, number in (("mean", np.mean), ("median", np.median)):
            out[f"{stat}_{key}_ms"] = float(number(ms)) if len(ms) else None
        for p in (90, 99):
            out[f"p{p}_{key}_ms"] = float(np.percentile(ms, p)) if len(ms) else None
    return out


def _held_out(replay: Replay, mask: np.ndarray, fitted: CostCoefficients, inputs) -> HeldOutRun:
    blocks = inputs.engine.get("num_gpu_blocks_override")
    lat = {"measured": replay.observed}
    summaries = {"measured": _summary(replay.observed, mask, blocks)}
    for way, coefficients in (("calibrated", fitted), ("uncalibrated", CostCoefficients())):
        result = simulate_replay(replay, coefficients)
        lat[way] = simulated(result.recorder)
        summaries[way] = _summary(lat[way], mask, result.recorder.num_gpu_blocks)
    open_loop = replay.scenario.workload.arrival.process != "closed"
    flags = {way: growing_ttft(x, mask) if open_loop else None for way, x in lat.items()}
    latencies = {
        way: {"ttft": x.ttft_s[mask] * 1e3, "tpot": x.tpot_s(mask) * 1e3, "e2el": x.e2e_s[mask] * 1e3}
        for way, x in lat.items()
    }
    return HeldOutRun(
        f"{replay.name} (held out)",
        replay.scenario,
        summaries["measured"],
        summaries["calibrated"],
        summaries["uncalibrated"],
        latencies,
        {},
        flags,
        {},
    )


def _profile(scenario, engine, fit: VllmFit, inputs, paths):
    from planner.calibration.device_gpu import calibration_gpu
    from planner.calibration.profile import Profile, content_id, fit_correlation, now_utc

    versions = sorted({run.vllm_version for run in inputs.bench if run.vllm_version})
    requests = sum(len(run) for run in inputs.bench)
    span = sum(run.span_s for run in inputs.bench)
    if not inputs.bench:  # scrapes alone: their windows
        e2e = [w.histogram(names.E2E) for w in inputs.windows]
        requests, span = int(sum(h.count for h in e2e if h is not None)), sum(w.window_s for w in inputs.windows)
    provenance = (
        f"fitted from vLLM metrics (files: {', '.join(str(p) for p in paths)}; window: {requests:,} requests over"
        f" {span:.1f} s; vLLM version: {', '.join(versions) or 'not in the files'})"
    )
    errors = np.abs(fit.result.relative_errors) if fit.result is not None else np.zeros(1)
    gpu = scenario.hardware.gpu
    profile = Profile(
        id="",
        created=now_utc(),
        source="vllm-metrics",
        device={"name": gpu.name, "kind": "cpu" if gpu.name == "cpu" else "cuda", "gpu": calibration_gpu(gpu).name},
        model=scenario.model.name,
        dtype=scenario.dtype,
        tensor_parallel_size=scenario.hardware.tensor_parallel_size,
        coefficients=fit.coefficients.to_dict(),
        uncertainty=dict(fit.uncertainty),
        correlation=fit_correlation(fit.result),
        engine=dataclasses.asdict(engine),
        fit={
            "rows": len(errors),
            "median_abs_error": float(np.median(errors)),
            "p90_abs_error": float(np.percentile(errors, 90)),
        },
        provenance=provenance,
    )
    return dataclasses.replace(profile, id=content_id(profile.to_dict()))
