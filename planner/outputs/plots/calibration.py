"""calibrate's figures: the held-out runs' latency CDFs (measured, calibrated, uncalibrated overlaid) and
every step's predicted vs measured duration. Built on Figure/Agg like the run plots (no pyplot state)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from planner.outputs.plots.style import DPI, note

WAYS = (("measured", "#222222", "-"), ("calibrated", "#1f77b4", "--"), ("uncalibrated", "#d62728", ":"))
PANELS = (("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms)"), ("e2el", "E2E latency (ms)"))
CLASS_COLORS = {"decode": "#1f77b4", "prefill": "#ff7f0e", "mixed": "#2ca02c"}


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    return path


def latency_cdfs(path: Path, runs: list[tuple[str, dict[str, dict[str, np.ndarray]]]]) -> Path:
    """One row per held-out scenario, one column per latency; runs: (name, way -> {ttft, tpot, e2el})."""
    fig = Figure(figsize=(11.0, 2.2 * len(runs) + 1.0), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(runs), len(PANELS), squeeze=False)
    for row, (name, latencies) in zip(axes, runs):
        for ax, (key, label) in zip(row, PANELS):
            drawn = False
            for way, color, style in WAYS:
                values = np.sort(np.asarray(latencies[way][key], dtype=np.float64))
                values = values[np.isfinite(values)]
                if len(values) == 0:
                    continue
                y = np.arange(1, len(values) + 1) / len(values)
                ax.plot(values, y, drawstyle="steps-post", color=color, ls=style, lw=1.4, label=way)
                drawn = True
            if not drawn:
                note(ax, "no values")
                continue
            ax.set_xlabel(label, fontsize=8)
            ax.set_ylim(0, 1.02)
            ax.grid(True, alpha=0.3)
            ax.tick_params(labelsize=7)
        row[0].set_ylabel(f"{name}\nfraction ≤ x", fontsize=8)
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Held-out runs: latency CDFs, measured vs simulated (calibrated, spec-sheet)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def step_scatter(path: Path, groups: list[tuple[str, np.ndarray, np.ndarray]], title: str) -> Path:
    """Predicted vs measured step seconds, log-log, the y = x line and +-10% band; groups: (label, measured,
    predicted)."""
    fig = Figure(figsize=(7.0, 6.0), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    everything = np.concatenate([np.concatenate([m, p]) for _, m, p in groups]) if groups else np.empty(0)
    everything = everything[np.isfinite(everything) & (everything > 0)]
    if len(everything) == 0:
        note(ax, "no steps")
        return _save(fig, path)
    lo, hi = everything.min() * 1e3 / 1.3, everything.max() * 1e3 * 1.3
    line = np.array([lo, hi])
    ax.fill_between(line, line / 1.1, line * 1.1, color="#999999", alpha=0.2, lw=0, label="±10%")
    ax.plot(line, line, color="#555555", lw=1)
    for i, (label, measured, predicted) in enumerate(groups):
        color = CLASS_COLORS.get(label, f"C{i}")
        ax.scatter(measured * 1e3, predicted * 1e3, s=9, alpha=0.6, color=color, label=f"{label} ({len(measured):,})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time, calibrated (ms)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)
