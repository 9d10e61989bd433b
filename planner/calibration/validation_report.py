"""The held-out validation's report: every figure's relative error, calibrated and uncalibrated, judged
against the issue's targets, as terminal lines (`report_lines`) and as calibration.md
(`calibration_markdown`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from planner.calibration.busy import MAX_OTHER_LOAD, MIN_CPU_SHARE
from planner.calibration.intervals import chance_inside
from planner.calibration.machine_check import SLOWDOWN_LIMIT
from planner.calibration.validate import HELD_OUT_INTERVAL_RUNS, HeldOutRun
from sim.metrics import LATENCY_KEYS

METRICS = (
    ("request_throughput", "requests/s"),
    ("output_throughput", "output tokens/s"),
    *[
        (f"{stat}_{key}_ms", f"{label} {stat_label}")
        for key, label in zip(LATENCY_KEYS, ("TTFT", "TPOT", "ITL", "E2E"))
        for stat, stat_label in (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99"))
    ],
    ("num_gpu_blocks", "num_gpu_blocks"),
    ("peak_memory_bytes", "peak memory (bytes)"),
)
# Targets of the issue, as |relative error| limits on the held-out means and throughputs.
TARGETS = {
    "cpu": {"mean_tpot_ms": 0.10, "mean_e2el_ms": 0.10, "output_throughput": 0.10, "mean_ttft_ms": 0.20},
    "cuda": {"mean_tpot_ms": 0.03, "mean_e2el_ms": 0.03, "output_throughput": 0.03, "mean_ttft_ms": 0.08},
}


def relative_error(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or predicted is None or not np.isfinite(measured) or measured == 0:
        return None
    return (predicted - measured) / abs(measured)


def value(summary: dict, key: str) -> float | None:
    if key == "num_gpu_blocks":
        return summary["memory"]["num_gpu_blocks"]
    if key == "peak_memory_bytes":
        if "peak_memory_bytes" in summary:
            return summary["peak_memory_bytes"]
        m = summary["memory"]  # the simulator's peak: weights + activation peak + the KV pool + non-torch
        return (
            m["weights_bytes"] + m["activation_bytes"] + m["num_gpu_blocks"] * m["block_bytes"] + m["non_torch_bytes"]
        )
    return summary.get(key)


def error_rows(run: HeldOutRun) -> list[dict]:
    rows = []
    for key, label in METRICS:
        measured = value(run.measured, key)
        calibrated, uncalibrated = value(run.calibrated, key), value(run.uncalibrated, key)
        rows.append(
            {
                "metric": key,
                "label": label,
                "measured": measured,
                "calibrated": calibrated,
                "calibrated_error": relative_error(measured, calibrated),
                "uncalibrated": uncalibrated,
                "uncalibrated_error": relative_error(measured, uncalibrated),
            }
        )
    return rows


def _num(v: float | None) -> str:
    if v is None or not np.isfinite(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.3g}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:+.1f}%"


def _flag(run: HeldOutRun) -> str:
    flags = run.saturated
    if flags["measured"] is None:
        load = "closed loop"
    else:
        shown = [way for way in ("measured", "calibrated", "uncalibrated") if flags[way]]
        load = "SATURATED (" + ", ".join(shown) + ")" if shown else "not saturated"
    return load if run.machine is None or run.machine.clean else f"{load}; {run.machine.describe()}"


def machine_line(runs: list[HeldOutRun]) -> str | None:
    """How many live runs ran on the machine the sweep measured (None when nothing was checked)."""
    checked = [run for run in runs if run.machine is not None]
    if not checked:
        return None
    clean = sum(run.machine.clean for run in checked)
    line = (
        f"Machine check: {clean} of {len(checked)} live runs ran as fast as the sweep (reference step within"
        f" {SLOWDOWN_LIMIT:.0%}"
        + (
            f", engine on the CPU >= {MIN_CPU_SHARE:.0%} of its busy time, other processes <= {MAX_OTHER_LOAD} CPUs)"
            if checked[0].machine.cpu_share is not None
            else ")"
        )
    )
    if clean < len(checked):
        line += "; the errors of the others include other processes' load, not only the cost model's"
    return line


def summary_table(runs: list[HeldOutRun], device: str) -> list[list[str]]:
    """One row per scenario: the target metrics' errors, calibrated and uncalibrated, and the flag."""
    keys = list(TARGETS[device])
    table = []
    for run in runs:
        errors = {row["metric"]: row for row in error_rows(run)}
        cells = [run.name]
        for key in keys:
            cells.append(f"{_pct(errors[key]['calibrated_error'])} ({_pct(errors[key]['uncalibrated_error'])})")
        cells.append(_flag(run))
        table.append(cells)
    return table


def _abs_errors(runs: list[HeldOutRun], key: str, way: str) -> list[float]:
    rows = (next(r for r in error_rows(run) if r["metric"] == key) for run in runs)
    return [abs(row[f"{way}_error"]) for row in rows if row[f"{way}_error"] is not None]


def target_lines(runs: list[HeldOutRun], device: str) -> list[str]:
    """Per target metric, the |error| over the held-out scenarios against the issue's target (every scenario
    within it), judged on the runs whose machine was the sweep's (MachineCheck.clean) when some were not:
    a run on a slower machine measures the machine. Fewer than half the runs clean: not judged. Every run's
    figure is printed beside, and the uncalibrated simulator's."""
    clean = [run for run in runs if run.machine is None or run.machine.clean]
    partial = 0 < len(clean) < len(runs)  # judge the clean runs, and print every run's figure beside
    judged = clean or runs
    over = f"the {len(judged)} runs as fast as the sweep" if partial else f"all {len(runs)} runs"
    # too few runs at the sweep's speed to say anything of the scenarios the others stand for
    enough = 2 * len(clean) >= len(runs)
    lines = []
    for key, limit in TARGETS[device].items():
        cal, every, uncal = (_abs_errors(judged, key, "calibrated"), _abs_errors(runs, key, "calibrated"),
                             _abs_errors(runs, key, "uncalibrated"))  # fmt: skip
        if not cal:
            continue
        verdict = ("met" if max(cal) <= limit else "MISSED") if enough else "NOT JUDGED"
        beside = (
            f"; all {len(runs)}: mean {np.mean(every) * 100:.1f}% (worst {max(every) * 100:.1f}%)" if partial else ""
        )
        lines.append(
            f"  {key:<20} mean |error| {np.mean(cal) * 100:5.1f}% (worst {max(cal) * 100:5.1f}%) over {over}"
            f"{beside}; uncalibrated {np.mean(uncal) * 100:.1f}%; target <= {limit * 100:.0f}%: {verdict}"
        )
    if not enough:
        lines.append(
            f"  (not judged: only {len(clean)} of {len(runs)} runs ran as fast as the sweep, fewer than half;"
            " calibrate again when the machine is steady)"
        )
    return lines


def coverage_line(runs: list[HeldOutRun]) -> str:
    """How often the measured value fell inside the calibrated 90% interval, over scenarios x metrics."""
    seen = [v for run in runs for v in run.covered.values() if v is not None]
    if not seen:
        return "Intervals: not computed"
    keys = [k for k in TARGETS["cpu"] if any(run.covered.get(k) is not None for run in runs)]
    target = [run.covered[k] for run in runs for k in keys if run.covered.get(k) is not None]
    interval_runs = HELD_OUT_INTERVAL_RUNS  # what calibrate's held-out runs use (validate.run_held_out's default)
    return (
        f"Intervals (90%, workload seeds x coefficient draws): the measured value fell inside in {sum(seen)} of"
        f" {len(seen)} (scenario, statistic) pairs ({sum(seen) / len(seen):.0%}); for {', '.join(keys)}:"
        f" {sum(target)} of {len(target)} ({sum(target) / max(len(target), 1):.0%}); a model exactly right lands"
        f" inside the 5%-95% range of {interval_runs} runs about {chance_inside(interval_runs):.0%} of the time"
    )


def report_lines(runs: list[HeldOutRun], device: str) -> list[str]:
    """The terminal report: one line per scenario, then the targets."""
    heads = ["scenario", *TARGETS[device], "run"]
    table = summary_table(runs, device)
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(heads)]
    lines = [
        "Held-out validation: simulated vs measured, calibrated (uncalibrated) relative error",
        "  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths)),
    ]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in table]
    machine = machine_line(runs)
    lines += ["Targets (mean over the held-out scenarios):", *target_lines(runs, device), coverage_line(runs)]
    return lines + ([machine] if machine else [])


def calibration_markdown(runs: list[HeldOutRun], device: str, header: list[str], figures: list[Path]) -> str:
    """calibration.md: what was calibrated, the summary table, and every scenario's full error table."""
    out = ["# Calibration", "", *header, "", "## Held-out validation", ""]
    heads = ["scenario", *TARGETS[device], "run"]
    out += ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    out += ["| " + " | ".join(row) + " |" for row in summary_table(runs, device)]
    out += ["", "Each cell: calibrated error (uncalibrated error), as (predicted - measured) / measured.", ""]
    out += [
        "Targets (mean |error| over the held-out scenarios):",
        "",
        *[f"- {line.strip()}" for line in target_lines(runs, device)],
        "",
        coverage_line(runs),
    ]
    if machine := machine_line(runs):
        out += ["", machine]
    for run in runs:
        out += ["", f"### {run.name} ({_flag(run)})", ""]
        out += ["| metric | measured | calibrated | error | uncalibrated | error |", "|---|---:|---:|---:|---:|---:|"]
        for row in error_rows(run):
            out.append(
                f"| {row['label']} | {_num(row['measured'])} | {_num(row['calibrated'])} | {_pct(row['calibrated_error'])}"
                f" | {_num(row['uncalibrated'])} | {_pct(row['uncalibrated_error'])} |"
            )
    if device == "cpu":
        out += ["", "Peak memory on CPU: measured is the process's peak resident set (Python, torch, everything);"]
        out += ["the simulator's is weights + activations + the KV pool, so the two are not comparable there."]
    out += ["", "## Figures", "", *[f"![{p.stem}]({p.name})" for p in figures], ""]
    return "\n".join(out)
