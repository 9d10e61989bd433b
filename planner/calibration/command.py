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

import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from planner.errors import PlannerError
from sim.config import Scenario

DEFAULT_BUDGET_S = {"cpu": 45.0, "cuda": 240.0}
DEFAULT_HELD_OUT_REQUESTS = {"cpu": 32, "cuda": 200}
# The CPU default: scenarios/cpu_tiny.yaml's model and limits, with a pool big enough for every sweep shape
# (on CPU the memory model would hand the tiny model millions of blocks of host RAM).
CPU_DEFAULT = {
    "model": "tiny-llama",
    "dtype": "float32",
    "hardware": {"gpu": "cpu"},
    "engine": {"max_num_seqs": 16, "max_num_batched_tokens": 256, "max_model_len": 512, "num_gpu_blocks_override": 600},
}
DEFAULT_WORKLOAD = {"num_requests": 32, "seed": 0, "arrival": {"process": "poisson", "rate": 10.0}}  # for validation
CUDA_MAX_MODEL_LEN = 4096  # the sweep's longest context on CUDA (or the model's, if shorter)


def default_scenario(device: str, model: str | None) -> Scenario:
    from planner.scenario import validate_mapping

    if device == "cpu":
        data = CPU_DEFAULT | ({"model": model} if model else {})
        data |= {"name": f"calibrate-{data['model']}-cpu", "workload": DEFAULT_WORKLOAD}
        return validate_mapping(data, f"built-in default ({data['model']} on cpu)", Path.cwd())
    from planner.catalog import load_model_catalog

    gpu, catalog = catalog_gpu_for_device(), load_model_catalog()
    if model and model not in catalog:
        raise PlannerError(f"--model {model}: not in the model catalog; known: {', '.join(catalog)}")
    names = [model] if model else sorted(catalog, key=lambda name: -catalog[name].num_params)
    for name in names:
        max_len = min(CUDA_MAX_MODEL_LEN, catalog[name].max_position_embeddings)
        data = {"name": f"calibrate-{name}-{gpu}", "model": name, "dtype": "bfloat16", "hardware": {"gpu": gpu}}
        data |= {"engine": {"max_model_len": max_len}, "workload": DEFAULT_WORKLOAD}
        try:
            scenario = validate_mapping(data, f"built-in default ({name} on {gpu})", Path.cwd())
        except PlannerError:
            if model:
                raise
            continue  # e.g. a model this GPU's dtype or limits rule out: try the next one
        if not _fit_problems(scenario):
            return scenario
        if model:
            raise PlannerError(f"--model {model}: does not fit one {gpu}: " + "; ".join(_fit_problems(scenario)))
    raise PlannerError(f"no catalog model fits one {gpu}; give a scenario file")


def _fit_problems(scenario: Scenario) -> list[str]:
    from sim.memory import fit_problems, memory_breakdown

    return fit_problems(scenario, memory_breakdown(scenario))


def catalog_gpu_for_device() -> str:
    """The catalog entry for the visible CUDA device, from its name ("NVIDIA H100 80GB HBM3" -> h100-sxm)."""
    import torch

    from planner.catalog import load_gpu_catalog

    name = torch.cuda.get_device_name(0).lower()
    catalog = load_gpu_catalog()
    known = [
        ("h100", "pcie", "h100-pcie"),
        ("h100", "", "h100-sxm"),
        ("h200", "", "h200"),
        ("a100", "40gb", "a100-40gb"),
        ("a100", "", "a100-80gb"),
        ("l40s", "", "l40s"),
        ("a10g", "", "a10g"),
        ("a10", "", "a10"),
        ("l4", "", "l4"),
        ("4090", "", "rtx-4090"),
        ("mi300x", "", "mi300x"),
    ]
    for family, variant, entry in known:
        if family in name and variant in name and entry in catalog:
            return entry
    raise PlannerError(f"the GPU {name!r} has no catalog entry; give a scenario file naming hardware.gpu")


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


def _engine_modules():
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


def calibrate_scenario(
    scenario: Scenario, device: str, budget_s: float, out: Path | None, held_out_requests: int
) -> tuple[Path, list[str]]:
    """The whole flow for one scenario; returns the profile's path and the report's lines (also printed)."""
    torch, sweep, ModelRunner = _engine_modules()
    from gpu_engine.reference_step import ReferenceProbe, reference_shape
    from gpu_engine.sweep_grid import blocks_for_grid
    from gpu_engine.sweep_timing import UNSTABLE_CI
    from planner.calibration import fitting, profile
    from planner.calibration.probe import probe_lines, probe_memory

    if scenario.hardware.tensor_parallel_size > 1 or scenario.hardware.replicas > 1:
        raise PlannerError(f"{scenario.source}: calibrate runs one GPU: tensor_parallel_size and replicas must be 1")
    e = scenario.engine
    started = time.perf_counter()
    say(f"calibrating {scenario.model.name} ({scenario.dtype}) on {device}: {scenario.source}")

    runner = ModelRunner(scenario.model, scenario.dtype, device, None, e.block_size, seed=scenario.workload.seed)
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
    say("", *fit.lines())

    path = out or profile.default_profile_dir() / f"{scenario.model.name}-{scenario.dtype}-{device}.yaml"
    rows_path = path.with_suffix(".rows.csv")
    from gpu_engine.engine import CPU_THREADS

    engine = dataclasses.asdict(e) | ({"cpu_threads": CPU_THREADS} if device == "cpu" else {})
    command = "planner calibrate " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["calibrate"] else "planner calibrate"
    prof = profile.profile_from_fit(
        scenario, fit, "live-sweep", engine, rows_path.name, f"step sweep on the live engine: {command}"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_rows_csv(rows_path, rows)
    saved = profile.save_profile(prof, path)
    say("", f"wrote the profile {saved} (id {prof.id}) and its {len(stable)} sweep rows {rows_path}")

    report_dir = path.with_name(path.stem + "-validation")
    held_out = scenario
    if device == "cpu" and e.num_gpu_blocks_override is None:
        # The CPU "device" is host RAM: the memory model would give the held-out engines millions of blocks
        # (GiBs). The sweep's pool is enough for every shape the limits allow.
        held_out = dataclasses.replace(scenario, engine=dataclasses.replace(e, num_gpu_blocks_override=num_blocks))
        say(f"held-out runs on CPU use the sweep's pool of {num_blocks:,} KV blocks (engine.num_gpu_blocks_override)")
    validation_lines = validate_profile(
        held_out,
        device,
        held_out_requests,
        report_dir,
        rows,
        fit,
        prof,
        [*probe_lines(probe), "", *sweep_lines],
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
    from planner.calibration.validate import calibration_markdown, report_lines, run_held_out
    from planner.plots.calibration import latency_cdfs, step_scatter

    coefficients = fit.coefficients
    try:
        runs = run_held_out(
            scenario,
            coefficients,
            device,
            num_requests,
            lambda name: say(f"held-out run: {name}"),
            fit.uncertainty,
            reference=reference,
        )
    except EngineError as e:
        raise PlannerError(f"held-out validation: {e}") from e
    report_dir.mkdir(parents=True, exist_ok=True)
    figures = [latency_cdfs(report_dir / "latency_cdfs.png", [(r.name, r.latencies_ms) for r in runs])]
    groups = []
    for step_class in ("decode", "prefill", "mixed"):
        pick = rows["step_class"] == step_class
        sub = {k: v[pick] for k, v in rows.items()}
        groups.append(
            (f"sweep {step_class}", sub["duration_s"], fitting.predict_rows(scenario, coefficients, sub, serial=True))
        )
    measured = np.concatenate([r.measured_steps["duration_s"] for r in runs])
    predicted = np.concatenate(
        [fitting.predict_rows(r.scenario, coefficients, r.measured_steps, serial=True) for r in runs]
    )
    groups.append(("held-out live steps", measured, predicted))
    figures.append(step_scatter(report_dir / "step_scatter.png", groups, f"{scenario.model.name} on {device}"))
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
    (report_dir / "calibration.md").write_text(calibration_markdown(runs, device, header, figures))
    lines = report_lines(runs, device)
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


def cmd_calibrate(args) -> int:
    """The `calibrate` subcommand (planner.cli wires it)."""
    if args.from_runs:
        if args.gpu or args.device or args.scenarios or args.model:
            raise PlannerError("--from fits existing runs: give it no --gpu/--device, scenario or --model")
        return _from_runs(args)
    device = "cuda" if args.gpu else args.device
    if device is None:
        raise PlannerError("say what to calibrate: --device cpu, --gpu (= --device cuda), or --from RUN_DIR ...")
    if args.gpu and args.device not in (None, "cuda"):
        raise PlannerError(f"--gpu means --device cuda; it contradicts --device {args.device}")
    if args.budget_s is not None and not args.budget_s > 0:
        raise PlannerError(f"--budget-s {args.budget_s}: must be a positive number of seconds")
    if args.held_out_requests is not None and args.held_out_requests < 4:
        raise PlannerError(f"--held-out-requests {args.held_out_requests}: must be at least 4")
    if args.out and len(args.scenarios) > 1:
        raise PlannerError(f"--out {args.out}: names one profile file, but {len(args.scenarios)} scenarios were given")
    if args.out and args.out.exists() and args.out.is_dir():
        raise PlannerError(f"--out {args.out}: is a folder; give the profile's file name (e.g. {args.out}/tiny.yaml)")
    torch = _engine_modules()[0]
    if device == "cuda" and not torch.cuda.is_available():
        raise PlannerError("--device cuda: no CUDA device is visible to torch (use --device cpu)")
    from planner.scenario import load_scenario

    scenarios = [load_scenario(path) for path in args.scenarios] or [default_scenario(device, args.model)]
    if args.model and args.scenarios:
        raise PlannerError("--model picks the built-in default's model; a scenario names its own model")
    budget_s = (args.budget_s or DEFAULT_BUDGET_S[device]) / len(scenarios)
    held_out = args.held_out_requests or DEFAULT_HELD_OUT_REQUESTS[device]
    from gpu_engine.engine import CPU_THREADS

    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(CPU_THREADS)
    try:
        for scenario in scenarios:
            calibrate_scenario(scenario, device, budget_s, args.out, held_out)
    finally:
        torch.set_num_threads(threads)
    return 0


def _from_runs(args) -> int:
    from planner.calibration import fitting, profile

    started = time.perf_counter()
    prof = fitting.fit_from_runs(args.from_runs, warn=say)
    path = args.out or profile.default_profile_dir() / f"{prof.model}-{prof.dtype}-runs-{prof.id}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = profile.save_profile(prof, path)
    say(*profile_lines(prof), f"wrote the profile {saved} in {time.perf_counter() - started:.1f} s")
    return 0


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
    return lines
