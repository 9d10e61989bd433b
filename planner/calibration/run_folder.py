"""A `planner run --out` folder read for `planner calibrate --from`: its summary.json (checked as `planner
compare` reads one), the cost model's part of the resolved scenario it records, and its steps.csv, every value
the fit reads checked (a PlannerError naming the file, the row and column, and what is allowed)."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np

from planner.errors import PlannerError
from planner.results import read_summary, shown_json
from sim.config import EngineConfig, GpuSpec, HardwareConfig, ModelSpec, Scenario, SloConfig, WorkloadConfig

SCENARIO_SECTIONS = ("scenario", "scenario.model", "scenario.hardware", "scenario.hardware.gpu", "scenario.engine")


def _known(cls: type, data: dict) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _sections(data: dict, where: str) -> dict[str, dict]:
    """The resolved scenario's sections the cost model is built from, each an object, or a PlannerError naming
    the first that is missing or is not one."""
    found = {"": data}
    for key in SCENARIO_SECTIONS:
        parent, _, name = key.rpartition(".")
        value = found[parent].get(name)
        if not isinstance(value, dict):
            shown = "is missing" if name not in found[parent] else f"= {shown_json(value)}"
            raise PlannerError(
                f"{where}: {key} {shown}: must be an object (the resolved scenario `planner run` writes)"
            )
        found[key] = value
    return found


def scenario_from_summary(data: dict, where: str) -> Scenario:
    """The cost model's part of a summary.json's resolved scenario (model, dtype, GPU, engine)."""
    sections = _sections(data, where)
    s, hardware = sections["scenario"], sections["scenario.hardware"]
    try:
        return Scenario(
            name=s["name"],
            model=ModelSpec(**_known(ModelSpec, sections["scenario.model"])),
            dtype=s["dtype"],
            hardware=HardwareConfig(
                gpu=GpuSpec(**_known(GpuSpec, sections["scenario.hardware.gpu"])),
                **_known(HardwareConfig, {k: v for k, v in hardware.items() if k != "gpu"}),
            ),
            engine=EngineConfig(**_known(EngineConfig, sections["scenario.engine"])),
            workload=WorkloadConfig(),
            slo=SloConfig(),
            source=where,
        )
    except (KeyError, TypeError) as e:
        raise PlannerError(
            f"{where}: summary.json has no usable `scenario` ({e!r}); was it written by planner run?"
        ) from None


def read_run(run_dir: Path) -> tuple[dict, Scenario, dict[str, np.ndarray]]:
    """(summary, scenario, steps) of one `planner run --out` folder, with clear errors."""
    run_dir = Path(run_dir)
    summary_path, steps_path = run_dir / "summary.json", run_dir / "steps.csv"
    for path in (summary_path, steps_path):
        if not path.is_file():
            raise PlannerError(f"{run_dir}: no {path.name} (give folders that `planner run --out` wrote)")
    summary = read_summary(summary_path)
    if summary.get("mode") != "measured":
        raise PlannerError(
            f"{summary_path}: mode is {summary.get('mode')!r}: calibrate fits measured runs (`planner run`), not simulations"
        )
    scenario = scenario_from_summary(summary, str(summary_path))
    try:
        with warnings.catch_warnings():  # an empty file: numpy warns, then fails on the header it lacks
            warnings.simplefilter("ignore")
            table = np.atleast_1d(np.genfromtxt(steps_path, delimiter=",", names=True, dtype=np.float64))
    except ValueError as e:  # not UTF-8, or rows of another length: numpy's last line names the first
        raise PlannerError(f"{steps_path}: not a steps.csv ({str(e).strip().splitlines()[-1].strip()})") from None
    except IndexError:  # numpy's way of saying there is no header line
        raise PlannerError(f"{steps_path}: empty: not a steps.csv") from None
    needed = (
        "duration_s",
        "num_prefill_tokens",
        "num_decode_requests",
        "num_sampled",
        "attention_pairs",
        "sum_context_tokens",
    )
    missing = [n for n in needed if table.dtype.names is None or n not in table.dtype.names]
    if missing or len(table) == 0:
        raise PlannerError(f"{steps_path}: no step rows with the columns {', '.join(missing or needed)}")
    rows = {name: table[name] for name in table.dtype.names}
    _check_steps(rows, steps_path)
    return summary, scenario, rows


# The fit divides by each measured time; steps.csv keeps microseconds, so a time it wrote is 0 or at least
# this (a smaller one is an edit, and dividing by it overflows).
STEPS_CSV_RESOLUTION_S = 1e-6
# Counts are whole numbers; beyond 2**53 a float no longer holds one exactly, and a count of 1e300 makes the
# predicted seconds overflow (no step comes near: attention_pairs of a 1M-token prompt are ~5e11).
MAX_COUNT = 2**53
COUNT_COLUMNS = (
    "num_prefill_tokens",
    "num_decode_requests",
    "num_sampled",
    "attention_pairs",
    "sum_context_tokens",
    "num_tokens",
    "num_seqs",
)


def _check_steps(rows: dict[str, np.ndarray], steps_path: Path) -> None:
    """What the fit reads, per row: counts that are whole numbers in [0, MAX_COUNT] (genfromtxt reads an
    empty or unreadable cell as nan); a duration_s of at least STEPS_CSV_RESOLUTION_S (a step that took no
    time has no relative error); a host_s and device_s of 0 (too short to measure: fit_steps leaves such rows
    out of the split fit) or at least that."""
    seconds = f"a finite number of seconds >= {STEPS_CSV_RESOLUTION_S:g}"
    allowed = {name: f"a whole number from 0 to {MAX_COUNT:,}" for name in COUNT_COLUMNS}
    allowed |= {"duration_s": seconds, "host_s": f"0 or {seconds}", "device_s": f"0 or {seconds}"}
    for name, rule in allowed.items():
        if name not in rows:
            continue
        column = rows[name]
        if name in COUNT_COLUMNS:
            good = (column >= 0) & (column <= MAX_COUNT) & (column == np.round(column))
        else:
            good = np.isfinite(column) & (column >= STEPS_CSV_RESOLUTION_S) | (name != "duration_s") & (column == 0)
        if not good.all():
            i = int(np.argmin(good))
            shown = "empty or not a number" if np.isnan(column[i]) else f"{column[i]:g}"
            raise PlannerError(f"{steps_path}: row {i + 1}, {name} = {shown}: must be {rule}")
