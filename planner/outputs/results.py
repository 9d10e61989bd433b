"""A run's outputs, the same for `planner simulate` and `planner run`: summary.json, requests.csv,
steps.csv and the plots. Keys follow vLLM's `bench serve` where it has one."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import TextIO

import numpy as np

from planner.errors import PlannerError, read_text_file
from planner.outputs.decode_runs import NUM_STEPS, DecodeRunMerger, with_num_steps
from planner.outputs.out_lock import lock_out_dir
from planner.outputs.plots import CDF_POINTS, PLOT_NAMES, PLOT_STEP_COLUMNS
from planner.outputs.plots.workers import PlotWorkers
from planner.scenario.load import scenario_to_dict
from planner.vllm_files.export import BENCH_FILE, METRICS_FILE, bench_json, metrics_text
from sim.config import Scenario
from sim.metrics import STEP_COLUMNS, Recorder, summarize

# A live speculative run's drafting, one row per step that drafted (sim.draft_cost.DRAFT_COLUMNS), keyed by the
# step's row in steps.csv, whose device_s holds it: what `planner calibrate --from` fits the drafting terms to.
DRAFTING_FILE = "drafting.csv"
OUTPUT_NAMES = ("summary.json", "requests.csv", "steps.csv", BENCH_FILE, METRICS_FILE, *PLOT_NAMES, DRAFTING_FILE)
_JSON_KINDS = {list: "an array", str: "a string", bool: "true/false", type(None): "null"}
MAX_SUMMARY_BYTES = 1 << 26  # a summary.json is a few kB; a larger file is not one


def check_out_dir(out_dir: Path, names: tuple[str, ...] = OUTPUT_NAMES) -> None:
    """Make sure the outputs (a run's, or those `names`) can be written, before the run: the folder is created
    (or exists), a file can be created in it, and no output name is taken by a folder; then the folder is locked
    against other planner processes (planner.outputs.out_lock). A PlannerError says what is wrong."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PlannerError(f"--out {out_dir}: exists and is not a folder") from None
    except OSError as e:  # a parent is a file (ENOTDIR), no permission, a name too long, a read-only disk...
        raise PlannerError(f"--out {out_dir}: cannot create the folder: {e.strerror or e}") from None
    try:
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as e:
        raise PlannerError(f"--out {out_dir}: cannot write in the folder: {e.strerror or e}") from None
    for name in names:
        path = out_dir / name
        if path.exists() and not path.is_file():
            raise PlannerError(f"--out {out_dir}: {name} exists and is not a file; remove it or choose another --out")
        if path.exists() and not os.access(path, os.W_OK):
            raise PlannerError(f"--out {out_dir}: {name} exists and cannot be overwritten")
    lock_out_dir(out_dir)


def read_summary(path: Path) -> dict:
    """A run's summary.json (or the --out folder holding it), checked: a JSON object whose compared metrics
    are finite numbers >= 0 or null, with at least one of them, whose `memory` and `scenario` (when there) are
    objects and whose `mode` (when there) is a string. Anything else is a PlannerError naming the file."""
    from planner.outputs.report import COMPARE_ROWS  # the metrics `compare` reads

    file = path / "summary.json" if path.is_dir() else path
    if path.is_dir() and not file.exists():
        raise PlannerError(f"{path}: a folder without summary.json (give a run's --out folder or its summary.json)")
    text = read_text_file(file, "summary.json (a run's --out folder or its summary.json)", MAX_SUMMARY_BYTES)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlannerError(f"{file}: line {e.lineno}, column {e.colno}: not JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:  # a number of > 4,300 digits, or nesting Python cannot follow
        raise PlannerError(f"{file}: not a summary.json ({e})") from None
    if not isinstance(data, dict):
        raise PlannerError(
            f"{file}: expected a JSON object (a run's summary), found {_JSON_KINDS.get(type(data), 'a number')}"
        )
    # planner writes both; an edited one of another type would drop the memory rows or break the header
    for key, kind, allowed in (
        ("memory", dict, "an object"),
        ("mode", str, "a string"),
        ("scenario", dict, "an object"),
    ):
        if key in data and not isinstance(data[key], kind):
            raise PlannerError(f"{file}: {key} = {shown_json(data[key])}: must be {allowed}")
    found = 0
    for key, _ in COMPARE_ROWS:
        value = data
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            continue
        if not _finite_number(value):
            raise PlannerError(f"{file}: {key} = {shown_json(value)}: must be a finite number or null")
        if value < 0:
            raise PlannerError(
                f"{file}: {key} = {shown_json(value)}: must be >= 0 or null (a rate, a latency or a size)"
            )
        found += 1
    if not found:
        names = ", ".join(key for key, _ in COMPARE_ROWS[:3])
        raise PlannerError(f"{file}: not a run's summary: none of its metrics ({names}, ...) is there")
    return data


def shown_json(value) -> str:
    """A JSON value as a message quotes it, cut short visibly (a number cut to its first digits would read as
    another number)."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite_number(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # JSON allows an integer of 400 digits: beyond any float, so no number compare can use
        return False


def build_summary(
    mode: str, scenario: Scenario, recorder: Recorder, memory: dict, num_rejected: int, num_truncated: int, extra: dict
) -> dict:
    """The summary: vLLM's metrics, then what this tool adds (memory, KV use, SLOs, the scenario)."""
    # The requests the scenario sent, those rejected as too long included (`completed` counts those served).
    summary = {"mode": mode, "scenario_name": scenario.name, "num_requests": recorder.requests.size + num_rejected}
    summary |= summarize(recorder, scenario.slo)
    summary |= {"num_rejected": num_rejected, "num_truncated": num_truncated, "memory": memory}
    summary |= extra
    summary["scenario"] = scenario_to_dict(scenario)
    return _finite(summary)


def _finite(value):
    """JSON has no NaN: undefined statistics (no request with two tokens, say) become null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def summary_json(summary: dict) -> str:
    return json.dumps(summary, indent=2, sort_keys=False) + "\n"


def write_drafting(out_dir: Path, drafts: dict[str, np.ndarray] | None) -> Path | None:
    """drafting.csv of a live speculative run's drafting rows (gpu_engine/speculative.py, drafting_rows), its
    seconds at 1 ns; without them (a simulation, or a run that does not draft) a drafting.csv already there is
    removed, so that a folder never pairs its steps.csv with another run's drafting."""
    path = out_dir / DRAFTING_FILE
    try:
        if drafts is None:
            path.unlink(missing_ok=True)
            return None
        names = list(drafts)
        formats = ["%d" if np.issubdtype(drafts[n].dtype, np.integer) else "%.9g" for n in names]
        table = np.column_stack([drafts[n].astype(np.float64) for n in names]).reshape(-1, len(names))
        np.savetxt(path, table, fmt=formats, delimiter=",", header=",".join(names), comments="")
    except OSError as e:
        raise PlannerError(f"--out {out_dir}: cannot write {DRAFTING_FILE}: {e.strerror or e}") from None
    return path


def _write_csv(path: Path, columns: dict[str, np.ndarray]) -> None:
    with path.open("w") as f:
        f.write(",".join(columns) + "\n")
        _write_rows(f, columns)


def _write_rows(f: TextIO, columns: dict[str, np.ndarray]) -> None:
    names = list(columns)
    if not names or len(columns[names[0]]) == 0:
        return
    formats = ["%.6f" if np.issubdtype(columns[n].dtype, np.floating) else "%d" for n in names]
    np.savetxt(f, np.column_stack([columns[n].astype(np.float64) for n in names]), fmt=formats, delimiter=",")


class StepsCsv:
    """steps.csv written as the run goes: the recorder's `steps_sink` (sim.metrics.Recorder). Rows come in
    the order steps end; within each chunk they are sorted by start time, so with one replica the file is
    in start order, and with several it is within each chunk of STEP_CHUNK_ROWS (sort by start_s for more).
    Runs of identical decode steps are merged into one row each (planner.outputs.decode_runs), unless all_steps."""

    def __init__(self, path: Path, all_steps: bool = False) -> None:
        self.path = path
        self.merger = None if all_steps else DecodeRunMerger()
        self.file = path.open("w")
        self.file.write(",".join([*STEP_COLUMNS, NUM_STEPS]) + "\n")

    def __call__(self, rows: dict[str, np.ndarray]) -> None:
        if self.merger is not None:
            _write_rows(self.file, self.merger.feed(rows))
        else:
            by_start = np.argsort(rows["start_s"], kind="stable")  # replicas' rows interleaved in time
            _write_rows(self.file, with_num_steps({name: column[by_start] for name, column in rows.items()}))

    def close(self) -> None:
        if self.merger is not None:
            _write_rows(self.file, self.merger.finish())
        self.file.close()


def write_outputs(
    out_dir: Path, summary: dict, recorder: Recorder, title: str, plot_workers: PlotWorkers | None = None
) -> list[Path]:
    """Write every output (the plots by plot_workers when given: planner.outputs.plots.workers); `check_out_dir` ran
    before the run, so only a full disk or a folder changed meanwhile can fail here (a PlannerError too)."""
    try:
        return _write_outputs(out_dir, summary, recorder, title, plot_workers)
    except OSError as e:
        raise PlannerError(f"--out {out_dir}: cannot write the outputs: {e}") from None


def _write_outputs(
    out_dir: Path, summary: dict, recorder: Recorder, title: str, plot_workers: PlotWorkers | None
) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    requests = recorder.requests.view()
    order = np.argsort(requests["request_id"], kind="stable")
    requests = {name: column[order] for name, column in requests.items()}
    steps = recorder.step_rows()  # with a StepsCsv sink: the rows left are written, the plots get a sample
    plot_steps = {name: steps[name] for name in PLOT_STEP_COLUMNS if name in steps}  # what a process is sent
    plots = (requests, plot_steps, summary, title)
    plot_options = {"itl_ms": recorder.itl.sample_ms(CDF_POINTS), "num_gpu_blocks": recorder.num_gpu_blocks}
    if plot_workers is not None:
        plot_workers.send(out_dir, *plots, **plot_options)  # drawn while the files below are written
    written = [out_dir / name for name in OUTPUT_NAMES[:5]]
    written[0].write_text(summary_json(summary))
    _write_csv(written[1], requests)
    written[3].write_text(bench_json(summary, recorder))  # vLLM's formats (planner/vllm_files/export.py)
    written[4].write_text(metrics_text(summary, recorder))
    if recorder.steps_sink is not None:  # steps.csv was written as the run went (StepsCsv)
        recorder.steps_sink.close()
    else:
        by_start = np.argsort(steps["start_s"], kind="stable")
        _write_csv(written[2], with_num_steps({name: column[by_start] for name, column in steps.items()}))
    if plot_workers is not None:
        return written + plot_workers.collect()
    from planner.outputs.plots.draw import write_plots  # matplotlib only loads when plots are asked for

    return written + write_plots(out_dir, *plots, **plot_options)
