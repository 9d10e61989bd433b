"""One scenario's calibration on the live engine (`calibrate_scenario`): memory probe -> step sweep -> fit
-> profile -> held-out validation (`validate_profile`), its report printed as it goes (`say`)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from planner.calibration.wake import from_waking_arrival, woken_steps
from planner.errors import PlannerError
from sim.config import Scenario
from sim.engine_facts import EngineFacts


class Bar:
    """A one-line progress bar on stderr (only on a terminal) for the sweep's budget."""

    def __init__(self, label: str) -> None:
        self.label, self.shown = label, False

    def __call__(self, done_s: float, budget_s: float) -> None:
        if not sys.stderr.isatty():
            return
        self.shown = True
        filled = int(30 * done_s / max(budget_s, 1e-9))
        bar = "#" * filled + "." * (30 - filled)
        print(f"\r{self.label} [{bar}] {done_s:.0f}/{budget_s:.0f} s", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr)


def engine_modules():
    try:
        import torch

        from gpu_engine import sweep
        from gpu_engine.runner import ModelRunner
    except ImportError as e:
        raise PlannerError(
            f"calibrate --device needs the live engine: install the engine extra (pip install 'planner[engine]'): {e}"
        ) from e
    return torch, sweep, ModelRunner


class RoundMeter:
    """For the CPU sweep's rounds (gpu_engine.sweep_timing.measure): started as a round starts, says at its end
    whether other processes kept the machine busy meanwhile (planner/calibration/busy.py) and the reference
    step's seconds (the slower of its timings at the round's start and end; a round starts with the last
    round's end timing, rounds following each other). Keeps every timing: their minimum is the machine's
    undisturbed speed, the one held-out runs are checked against."""

    def __init__(self, probe) -> None:  # a gpu_engine.reference_step.ReferenceProbe
        self.probe, self.times_s = probe, []

    def _time(self) -> float:
        self.times_s.append(self.probe.time(repeats=3, warmup=1))
        return self.times_s[-1]

    def __call__(self) -> Callable[[], tuple[bool, float]]:
        from gpu_engine.host_load import OtherCpuMeter
        from planner.calibration.busy import busy_reasons

        meter, first_s = OtherCpuMeter(), self.times_s[-1] if self.times_s else self._time()
        return lambda: (bool(busy_reasons(None, meter.load())), max(first_s, self._time()))


def profile_path(scenario: Scenario, device: str, out: Path | None) -> Path:
    """--out, else <profile folder>/<model>-<dtype>-<device>.yaml."""
    from planner.calibration.profile import default_profile_dir

    return out or default_profile_dir() / f"{file_name(scenario.model.name)}-{scenario.dtype}-{device}.yaml"


def file_name(model: str) -> str:
    """A model's name as part of a file name in the profile folder. A name may hold a path separator (an HF id,
    "org/model"; a config.json's path), so one is no error: each run of characters other than letters, digits,
    '.', '_' and '-' becomes '_', and leading dots go, so that no name ("../../x", "..") leads out of the
    folder or hides in it. The profile keeps the name as given: `auto` reads it there, not in the file name."""
    return re.sub(r"[^\w.-]+", "_", model).lstrip(".") or "model"


def written_beside(path: Path) -> tuple[Path, Path]:
    """What calibrating writes beside the profile: its sweep rows (CSV) and the validation report's folder."""
    return path.with_suffix(".rows.csv"), path.with_name(path.stem + "-validation")


def check_profile_path(path: Path, label: str) -> None:
    """Before the sweep (minutes): the profile, its rows and its validation report can be written where they
    go, rather than found unwritable after it."""
    rows_path, report_dir = written_beside(path)
    check_writable(path, label)
    check_writable(rows_path, label)
    check_writable(report_dir, label, folder=True)


def check_writable(path: Path, label: str, folder: bool = False) -> None:
    """Its folder is created (as `check_out` creates an --out folder); the file (or folder) is created as
    calibrating will create it, then removed unless it was there: what would refuse the real write
    (permissions, a read-only or virtual file system, a name too long, a file in the way) refuses this one,
    with a PlannerError starting with `label`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PlannerError(f"{label}: {path.parent} exists and is not a folder") from None
    except OSError as e:
        raise PlannerError(f"{label}: cannot create the folder {path.parent}: {e.strerror or e}") from None
    if folder and path.exists() and not path.is_dir():
        raise PlannerError(f"{label}: {path} exists and is not a folder (calibrating writes its report there)")
    try:
        _create_and_remove(path, folder)
    except OSError as e:
        raise PlannerError(f"{label}: cannot write {path}: {e.strerror or e}") from None


def _create_and_remove(path: Path, folder: bool) -> None:
    existed = path.exists()
    if folder:
        path.mkdir(exist_ok=True)
    else:
        with open(path, "a"):  # appending changes no file that is there
            pass
    if existed:
        return
    if folder:
        path.rmdir()
    else:
        path.unlink()


@contextlib.contextmanager
def writing(what: Path) -> Iterator[None]:
    """An OSError while writing (a full disk; a folder removed or made read-only since check_profile_path) as
    one message naming the file."""
    try:
        yield
    except OSError as e:
        raise PlannerError(f"cannot write {e.filename or what}: {e.strerror or e}") from None


def calibrate_scenario(
    scenario: Scenario, device: str, budget_s: float, path: Path, held_out_requests: int
) -> tuple[Path, list[str]]:
    """The whole flow for one scenario, writing the profile to `path` (profile_path, checked by
    check_profile_path); returns the profile's path and the report's lines (also printed)."""
    torch, sweep, ModelRunner = engine_modules()
    from gpu_engine.reference_step import ReferenceProbe, reference_shape
    from gpu_engine.sweep_grid import blocks_for_grid
    from gpu_engine.sweep_timing import UNSTABLE_CI
    from planner.calibration import fitting, profile
    from planner.calibration.probe import probe_lines, probe_memory

    if scenario.hardware.tensor_parallel_size > 1 or scenario.hardware.replicas > 1:
        raise PlannerError(f"{scenario.source}: calibrate runs one GPU: tensor_parallel_size and replicas must be 1")
    e = scenario.engine
    from gpu_engine.speculative import unsupported

    if unsupported(scenario):  # its drafting is fitted to live runs (before the sweep's minutes, not after)
        raise PlannerError(f"{scenario.source}: {unsupported(scenario)}: calibrate cannot time its drafting")
    started = time.perf_counter()
    say(f"calibrating {scenario.model.name} ({scenario.dtype}) on {device}: {scenario.source}")

    from gpu_engine.cuda_graphs import capture_sizes

    # The decode batches the fit prices as graphed (fitting.fit_steps with cuda_graphs) are those captured.
    graphs = capture_sizes(min(e.max_num_seqs, EngineFacts.of(scenario).cudagraph_capture_size))
    runner = ModelRunner(
        scenario.model, scenario.dtype, device, None, e.block_size, seed=scenario.workload.seed, cuda_graph_sizes=graphs
    )
    probe = probe_memory(scenario, runner)
    say(*probe_lines(probe))
    limit = probe["measured"]["num_gpu_blocks"] if e.num_gpu_blocks_override is None else e.num_gpu_blocks_override
    num_blocks = blocks_for_grid(e.max_num_seqs, e.max_num_batched_tokens, scenario.max_model_len, e.block_size, limit)
    runner.allocate(num_blocks)

    # The machine-speed reference (reference_shape), timed around the sweep, at every sweep round on
    # CPU (RoundMeter), and around and during every held-out run: it tells a held-out error from a machine
    # that got slower than it was when the sweep measured it.
    shape = reference_shape(e.max_num_seqs, scenario.max_model_len, e.block_size, num_blocks - 1)
    reference = ReferenceProbe(runner, shape)
    reference_before = reference.time()
    from gpu_engine.host_load import OtherCpuMeter
    from planner.calibration.busy import busy_reasons

    meter = RoundMeter(reference) if device == "cpu" else None
    others = OtherCpuMeter()
    bar, sweep_started = Bar(f"sweeping step shapes on {device}"), time.perf_counter()
    try:
        rows = sweep.run_sweep(runner, e, scenario.max_model_len, budget_s, progress=bar, round_meter=meter)
    finally:
        bar.close()
    from gpu_engine.sweep_idle import IDLE_S, time_wake
    from planner.calibration.wake import wake_from_idle_samples, with_wake

    cold_s, warm_s, num_shapes = time_wake(runner, e, scenario.max_model_len)  # a few seconds, past the budget
    wake = wake_from_idle_samples(cold_s, warm_s, IDLE_S, num_shapes)
    other_load = others.load()
    reference_after = reference.time()
    # the machine's undisturbed speed: a busy spell only ever adds time
    round_times_s = meter.times_s if meter else []
    reference_s = min([reference_before, reference_after, *round_times_s])
    # On CUDA the runner replays decode steps from CUDA graphs (gpu_engine/cuda_graphs.py): fit that form.
    cuda_graphs = runner.decode_graphs is not None
    del runner, reference, meter  # the held-out runs build their own engines: free this one's weights and KV first
    if device == "cuda":
        torch.cuda.empty_cache()
    stable = rows["stable"]
    classes = ", ".join(f"{int((rows['step_class'] == c).sum())} {c}" for c in ("decode", "prefill", "mixed"))
    sweep_lines = [
        (
            f"Step sweep: {len(stable)} shapes in {time.perf_counter() - sweep_started:.0f} s ({classes});"
            f" {int(rows['num_outliers'].sum())} outlier samples re-measured; {int((~stable).sum())} shapes still"
            f" noisy (median's 95% interval wider than {UNSTABLE_CI:.0%}), left out of the fit"
        ),
        f"reference step ({shape.num_decode} decodes after {shape.decode_context} tokens): {reference_before * 1e3:.3g} ms"
        f" before the sweep, {reference_after * 1e3:.3g} ms after"
        + (
            f", {min(round_times_s) * 1e3:.3g}-{max(round_times_s) * 1e3:.3g} ms over its rounds"
            if round_times_s
            else ""
        )
        + ("" if other_load is None else f"; other processes kept {other_load:.2f} CPUs busy during it on average"),
    ]
    if device == "cpu" and busy_reasons(None, other_load):
        sweep_lines.append(
            "warning: the sweep ran beside other busy processes; its rounds during which they ran were measured"
            " again, but a load that never let up is in the fit (calibrate on a quiet machine)"
        )
    say("", *sweep_lines)
    fitted_rows = {k: v[stable] for k, v in rows.items()} if stable.sum() >= 8 else rows
    fit = fitting.fit_steps(scenario, fitted_rows, cuda_graphs=cuda_graphs)
    say("", *fit.lines(), *wake.lines())
    held_out = scenario
    if device == "cpu" and e.num_gpu_blocks_override is None:
        # The CPU "device" is host RAM: the memory model would give the held-out engines millions of blocks
        # (GiBs). The sweep's pool is enough for every shape the limits allow.
        held_out = dataclasses.replace(scenario, engine=dataclasses.replace(e, num_gpu_blocks_override=num_blocks))
        say(f"live runs on CPU use the sweep's pool of {num_blocks:,} KV blocks (engine.num_gpu_blocks_override)")
    drafting = None
    if e.speculative is not None:  # the drafting terms, fitted to live speculative runs (draft_fit.py)
        from planner.calibration.draft_fit import fit_drafting, measure_drafting

        rows_drafted = measure_drafting(held_out, device, held_out_requests, lambda name: say(f"drafting run: {name}"))
        drafting = fit_drafting(scenario, fit.coefficients, rows_drafted, cuda_graphs=cuda_graphs)
        say("", *drafting.lines())

    rows_path, report_dir = written_beside(path)
    from gpu_engine.engine import CPU_THREADS

    engine = dataclasses.asdict(e) | ({"cpu_threads": CPU_THREADS} if device == "cpu" else {})
    command = "planner calibrate " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["calibrate"] else "planner calibrate"
    prof = profile.profile_from_fit(
        scenario, fit, "live-sweep", engine, rows_path.name, f"step sweep on the live engine: {command}"
    )
    if drafting is not None:
        from planner.calibration.draft_fit import with_drafting

        prof = with_drafting(prof, drafting)
        # what the held-out runs simulate with: the target's fit and the drafting terms, each with its std
        fit = dataclasses.replace(fit, coefficients=drafting.coefficients, uncertainty=dict(prof.uncertainty))
    prof = with_wake(prof, wake)  # the held-out runs simulate with it too
    fit = dataclasses.replace(
        fit,
        coefficients=dataclasses.replace(fit.coefficients, idle_wake_s=wake.seconds),
        uncertainty=dict(prof.uncertainty),
    )
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_rows_csv(rows_path, rows)
        saved = profile.save_profile(prof, path)
    say("", f"wrote the profile {saved} (id {prof.id}) and its {len(stable)} sweep rows {rows_path}")

    validation_lines = validate_profile(
        held_out,
        device,
        held_out_requests,
        report_dir,
        rows,
        fit,
        prof,
        [*probe_lines(probe), "", *sweep_lines, *wake.lines(), *([] if drafting is None else ["", *drafting.lines()])],
        (shape, reference_s),
    )
    say("", *validation_lines, "", f"calibration took {time.perf_counter() - started:.0f} s")
    return saved, validation_lines


def validate_profile(
    scenario: Scenario,
    device: str,
    num_requests: int,
    report_dir: Path,
    rows: dict[str, np.ndarray],
    fit,  # fitting.StepFit
    prof,  # profile.Profile
    header_lines: list[str],  # the memory probe's and the sweep's, for calibration.md
    reference: tuple | None = None,  # (sweep_grid.Shape, its seconds at the sweep): validate.run_held_out's check
) -> list[str]:
    """Held-out runs, the terminal report, and calibration.md + figures in report_dir."""
    from gpu_engine.engine import EngineError
    from planner.calibration import fitting
    from planner.calibration.profile import fit_summary
    from planner.calibration.provenance import residual_spread
    from planner.calibration.validate import run_held_out
    from planner.calibration.validation_report import calibration_markdown, report_lines
    from planner.outputs.plots.calibration import latency_cdfs, step_scatter

    coefficients = fit.coefficients
    # The intervals a user of this profile gets (`simulate --intervals`: the coefficients' std and one step-time
    # factor per run from the fit's residual spread), so that their coverage is what is measured.
    uncertainty = fit.uncertainty | residual_spread(fit_summary(fit))
    try:
        runs = run_held_out(
            scenario,
            coefficients,
            device,
            num_requests,
            lambda name: say(f"held-out run: {name}"),
            uncertainty,
            reference=reference,
        )
    except EngineError as e:
        raise PlannerError(f"held-out validation: {e}") from e
    groups = []
    facts = EngineFacts.of(scenario)
    for step_class in ("decode", "prefill", "mixed"):
        pick = rows["step_class"] == step_class
        sub = {k: v[pick] for k, v in rows.items()}
        groups.append(
            (f"sweep {step_class}", sub["duration_s"], fitting.predict_rows(facts, coefficients, sub, serial=True))
        )
    # the steps after idle spells from their waking arrival, priced with the wake, as the simulator does (wake.py)
    measured = np.concatenate([from_waking_arrival(r.measured_steps, r.arrival_s) for r in runs])
    wake_s = coefficients.idle_wake_s or 0.0
    predicted = np.concatenate(
        [
            fitting.predict_rows(EngineFacts.of(r.scenario), coefficients, r.measured_steps, serial=True)
            + wake_s * woken_steps(r.measured_steps)
            for r in runs
        ]
    )
    groups.append(("held-out live steps", measured, predicted))
    drafting_lines = []
    if any(r.drafts is not None for r in runs):  # the drafting terms on drafting steps the fit never saw
        from planner.calibration.draft_fit import held_out_drafting

        drafting_lines, drafting_group = held_out_drafting(runs, coefficients)
        groups.append(drafting_group)
    what = f"{scenario.model.name} ({scenario.dtype}) on {device}, from {len(rows['duration_s'])} swept step shapes"
    header = [
        f"Profile `{prof.id}`: {what}; {len(runs)} held-out scenarios of {num_requests} requests each.",
        "",
        "```",
        *header_lines,
        "",
        *fit.lines(),
        "```",
    ]
    with writing(report_dir):
        report_dir.mkdir(parents=True, exist_ok=True)
        figures = [
            latency_cdfs(report_dir / "latency_cdfs.png", [(r.name, r.latencies_ms) for r in runs]),
            step_scatter(report_dir / "step_scatter.png", groups, f"{scenario.model.name} on {device}"),
        ]
        (report_dir / "calibration.md").write_text(calibration_markdown(runs, device, header, figures))
    lines = report_lines(runs, device) + drafting_lines
    return [*lines, f"wrote {report_dir / 'calibration.md'} and {', '.join(p.name for p in figures)}"]


def write_rows_csv(path: Path, rows: dict[str, np.ndarray]) -> None:
    names = list(rows)
    lines = [",".join(_cell(rows[n][i]) for n in names) for i in range(len(rows[names[0]]))]
    path.write_text("\n".join([",".join(names), *lines]) + "\n")


def _cell(v) -> str:
    if isinstance(v, float | np.floating):
        return f"{float(v):.9g}"
    if isinstance(v, bool | np.bool_):
        return str(int(v))
    return str(v)


def say(*lines: str) -> None:
    print("\n".join(lines), flush=True)
