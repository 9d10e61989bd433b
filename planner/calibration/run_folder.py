"""A `planner run --out` folder read for `planner calibrate --from`: its summary.json (checked as `planner
compare` reads one), the cost model's part of the resolved scenario it records, its steps.csv and, for a
speculative run, its drafting.csv, every value the fit reads checked (a PlannerError naming the file, the row and
column, and what is allowed)."""

from __future__ import annotations

import dataclasses
import typing
import warnings
from pathlib import Path

import numpy as np

from planner.errors import NO_VALUE, PlannerError, ScenarioError
from planner.outputs.results import DRAFTING_FILE, read_summary, shown_json
from planner.scenario.cross_checks import check_relations
from planner.scenario.rules import RULES, Ctx, Rule
from planner.scenario.special_fields import check_ranges as check_model_ranges
from planner.scenario.validation import TYPE_NAMES, build_dataclass
from sim.config import (
    ArrivalConfig,
    EngineConfig,
    HardwareConfig,
    ModelSpec,
    Scenario,
    SloConfig,
    WorkloadConfig,
)
from sim.draft_cost import DRAFT_COLUMNS, DRAFT_STEP

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


# The fit reads the run's steps, not its workload: a placeholder that passes the scenario checks stands for it.
_PLACEHOLDER_LOAD = WorkloadConfig(arrival=ArrivalConfig(rate=1.0))


def scenario_from_summary(data: dict, where: str) -> Scenario:
    """The cost model's part of a summary.json's resolved scenario (model, dtype, GPU, engine), checked as a
    scenario file's sections are (types, ranges, relations such as tensor parallel dividing the heads): an
    edited summary is no less input than a scenario, and a bad value made the fit divide by zero or fail on a
    missing dtype."""
    sections = _sections(data, where)
    s = sections["scenario"]
    ctx = Ctx(where, Path(where).parent)
    for key, rule in (("name", Rule(lambda v: True, "")), ("dtype", RULES[(Scenario, "dtype")])):
        value = s.get(key, NO_VALUE)
        if not isinstance(value, str) or not value or not rule.ok(value):
            allowed = rule.allowed or "expected a non-empty string"
            raise ScenarioError(
                where, f"scenario.{key}", value, f"{allowed} (the resolved scenario `planner run` writes)"
            )
    engine = _known(EngineConfig, sections["scenario.engine"])
    scenario = Scenario(
        name=s["name"],
        model=_model_spec(sections["scenario.model"], ctx),
        dtype=s["dtype"],
        hardware=build_dataclass(
            HardwareConfig, _known(HardwareConfig, sections["scenario.hardware"]), "scenario.hardware", ctx
        ),
        engine=build_dataclass(EngineConfig, engine, "scenario.engine", ctx),
        workload=_PLACEHOLDER_LOAD,
        slo=SloConfig(),
        source=where,
    )
    return check_relations(scenario, {"engine": engine}, ctx)


def _model_spec(data: dict, ctx: Ctx) -> ModelSpec:
    """The resolved ModelSpec a summary records (its own fields, not an HF config's), each of its type and in
    RULES' range, as an inline model's are."""
    hints = typing.get_type_hints(ModelSpec)
    fields = {}
    for name, value in _known(ModelSpec, data).items():
        is_tuple = typing.get_origin(hints[name]) is tuple
        kinds = (tuple,) if is_tuple else typing.get_args(hints[name]) or (hints[name],)  # `int | None`: both
        if is_tuple:  # a tuple of ints: JSON writes a list
            ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            value = tuple(value) if ok else value
        else:
            ok = any(_is(value, kind) for kind in kinds)
        if not ok:
            words = " or ".join("a list of integers" if k is tuple else TYPE_NAMES.get(k, "null") for k in kinds)
            raise ScenarioError(ctx.file, f"scenario.model.{name}", value, f"expected {words}")
        fields[name] = value
    try:
        spec = ModelSpec(**fields)
    except TypeError as e:  # a required field missing
        raise ScenarioError(ctx.file, "scenario.model", NO_VALUE, str(e)) from None
    return check_model_ranges(spec, "scenario.model", ctx)


def _is(value, kind) -> bool:
    if kind is type(None):
        return value is None
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


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
    table = _read_table(steps_path)
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


def read_arrivals(run_dir: Path) -> np.ndarray | None:
    """The run's requests' arrival seconds (requests.csv), or None for a folder without it (written before it was)."""
    path = Path(run_dir) / "requests.csv"
    if not path.is_file():
        return None
    table = _read_table(path)
    if table.dtype.names is None or "arrival_s" not in table.dtype.names:
        raise PlannerError(f"{path}: no arrival_s column (give folders that `planner run --out` wrote)")
    arrivals = np.asarray(table["arrival_s"], dtype=np.float64)
    if not np.all(np.isfinite(arrivals)) or np.any(arrivals < 0):
        raise PlannerError(f"{path}: arrival_s: expected finite seconds >= 0 from the run's start")
    return arrivals


def _read_table(path: Path) -> np.ndarray:
    """A CSV of `planner run --out` as numpy's named columns (one row at least as a 1-d array)."""
    _check_header(path)
    try:
        with warnings.catch_warnings():  # an empty file: numpy warns, then fails on the header it lacks
            warnings.simplefilter("ignore")
            return np.atleast_1d(np.genfromtxt(path, delimiter=",", names=True, dtype=np.float64))
    except ValueError as e:  # not UTF-8, or rows of another length: numpy's last line names the first
        raise PlannerError(f"{path}: not a {path.name} ({str(e).strip().splitlines()[-1].strip()})") from None
    except IndexError:  # numpy's way of saying there is no header line
        raise PlannerError(f"{path}: empty: not a {path.name}") from None


def read_drafting(run_dir: Path, steps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A speculative run's drafting.csv (planner.outputs.results.write_drafting), checked against its steps.csv
    rows (read_run's): each row's step a row of steps.csv, once, in order, and its draft_s a part of that step's
    device_s."""
    path = Path(run_dir) / DRAFTING_FILE
    if not path.is_file():
        raise PlannerError(
            f"{run_dir}: a speculative run (engine.speculative) without {DRAFTING_FILE}, its drafting per step, which"
            " --from fits apart from the verifying forward: run it again with `planner run --out` (which writes it)"
        )
    table = _read_table(path)
    needed = (DRAFT_STEP, *DRAFT_COLUMNS)
    missing = [n for n in needed if table.dtype.names is None or n not in table.dtype.names]
    if missing:
        raise PlannerError(f"{path}: no rows with the columns {', '.join(missing)}")
    rows = {name: table[name] for name in needed}
    device_s = np.asarray(steps["device_s"] if "device_s" in steps else steps["duration_s"], dtype=np.float64)
    num_steps = len(device_s)
    step = rows[DRAFT_STEP]
    whole = np.isfinite(step) & (step == np.round(step)) & (step >= 0) & (step < num_steps)
    _check_column(path, DRAFT_STEP, whole, step, f"a row of steps.csv: a whole number from 0 to {num_steps - 1}")
    step = step.astype(np.int64)
    later = np.r_[True, step[1:] > step[:-1]]
    _check_column(path, DRAFT_STEP, later, step, "greater than the row before's (one row per step, in order)")
    for name in DRAFT_COLUMNS[1:]:
        column = rows[name]
        good = np.isfinite(column) & (column >= 0) & (column <= MAX_COUNT)
        if name != "later_context_tokens":  # the later passes' mean context: not a whole number
            good &= column == np.round(column)
        _check_column(path, name, good, column, f"a number of tokens or rows from 0 to {MAX_COUNT:,}")
    draft_s, verify_s = rows["draft_s"], device_s[step] - np.nan_to_num(rows["draft_s"])
    good = np.isfinite(draft_s) & (draft_s > 0) & (verify_s >= STEPS_CSV_RESOLUTION_S)
    _check_column(
        path, "draft_s", good, draft_s,
        f"seconds > 0 and at least {STEPS_CSV_RESOLUTION_S:g} s below its step's device_s in steps.csv (the step"
        " holds its drafting)",
    )  # fmt: skip
    return rows | {DRAFT_STEP: step}


def _check_column(path: Path, name: str, good: np.ndarray, column: np.ndarray, rule: str) -> None:
    if not good.all():
        i = int(np.argmin(good))
        shown = "empty or not a number" if np.isnan(column[i]) else f"{column[i]:g}"
        raise PlannerError(f"{path}: row {i + 1}, {name} = {shown}: must be {rule}")


# The fit divides by each measured time; steps.csv keeps microseconds, so a time it wrote is 0 or at least
# this (a smaller one is an edit, and dividing by it overflows).
STEPS_CSV_RESOLUTION_S = 1e-6
MAX_STEP_S = 3600.0  # a step of an hour is no engine step (an edit): 1e300 made the fit's sums overflow
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


def _check_header(steps_path: Path) -> None:
    """A column named twice: numpy renames the second (duration_s_1) and the fit would read whichever."""
    with open(steps_path, encoding="utf-8", errors="replace") as f:
        names = [name.strip() for name in f.readline(1 << 16).split(",")]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise PlannerError(f"{steps_path}: line 1: the column {twice[0]} is named twice: not a steps.csv")


def _check_steps(rows: dict[str, np.ndarray], steps_path: Path) -> None:
    """What the fit reads, per row: counts that are whole numbers in [0, MAX_COUNT] (genfromtxt reads an
    empty or unreadable cell as nan); a duration_s of at least STEPS_CSV_RESOLUTION_S (a step that took no
    time has no relative error); a host_s and device_s of 0 (too short to measure: fit_steps leaves such rows
    out of the split fit) or at least that."""
    seconds = f"a number of seconds in [{STEPS_CSV_RESOLUTION_S:g}, {MAX_STEP_S:g}]"
    allowed = {name: f"a whole number from 0 to {MAX_COUNT:,}" for name in COUNT_COLUMNS}
    allowed["num_steps"] = "1 (calibrate fits single steps: `planner run` writes a row per step)"
    allowed |= {"duration_s": seconds, "host_s": f"0 or {seconds}", "device_s": f"0 or {seconds}"}
    for name, rule in allowed.items():
        if name not in rows:
            continue
        column = rows[name]
        if name == "num_steps":
            good = column == 1
        elif name in COUNT_COLUMNS:
            good = (column >= 0) & (column <= MAX_COUNT) & (column == np.round(column))
        else:
            measured = (column >= STEPS_CSV_RESOLUTION_S) & (column <= MAX_STEP_S)
            good = measured | (name != "duration_s") & (column == 0)
        _check_column(steps_path, name, good, column, rule)
