"""A run's outputs, the same for `planner simulate` and `planner run`: summary.json, requests.csv,
steps.csv and the plots. Keys follow vLLM's `bench serve` where it has one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from planner.scenario import scenario_to_dict
from sim.config import Scenario
from sim.metrics import Recorder, summarize


def build_summary(
    mode: str, scenario: Scenario, recorder: Recorder, memory: dict, num_rejected: int, num_truncated: int, extra: dict
) -> dict:
    """The summary: vLLM's metrics, then what this tool adds (memory, KV use, SLOs, the scenario)."""
    summary = {"mode": mode, "scenario_name": scenario.name, "num_requests": recorder.requests.size}
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


def _write_csv(path: Path, columns: dict[str, np.ndarray]) -> None:
    names = list(columns)
    formats = ["%.6f" if np.issubdtype(columns[n].dtype, np.floating) else "%d" for n in names]
    table = np.column_stack([columns[n].astype(np.float64) for n in names]) if names else np.empty((0, 0))
    np.savetxt(path, table, fmt=formats, delimiter=",", header=",".join(names), comments="")


def write_outputs(out_dir: Path, summary: dict, recorder: Recorder, title: str) -> list[Path]:
    from planner.plots import write_plots  # matplotlib only loads when plots are asked for

    out_dir.mkdir(parents=True, exist_ok=True)
    requests = recorder.requests.view()
    order = np.argsort(requests["request_id"], kind="stable")
    requests = {name: column[order] for name, column in requests.items()}
    steps = recorder.steps.view()
    by_start = np.argsort(steps["start_s"], kind="stable")  # replicas' rows interleaved in time
    steps = {name: column[by_start] for name, column in steps.items()}
    written = [out_dir / "summary.json", out_dir / "requests.csv", out_dir / "steps.csv"]
    written[0].write_text(summary_json(summary))
    _write_csv(written[1], requests)
    _write_csv(written[2], steps)
    written += write_plots(
        out_dir, requests, steps, summary, title, itl_ms=recorder.itl_ms(), num_gpu_blocks=recorder.num_gpu_blocks
    )
    return written
