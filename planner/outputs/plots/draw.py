"""`write_plots`: the three figures of a run drawn in this process.

Figures are built with `matplotlib.figure.Figure` on an Agg canvas, never through pyplot, so writing plots
changes no global matplotlib state (backend, open figures, rcParams) of a caller's session. Anything missing
(no requests, no multi-token request, no step records, no ITL) leaves its panel with a note instead of failing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from planner.outputs.plots import PLOT_NAMES
from planner.outputs.plots.context import Context
from planner.outputs.plots.kv_cache import kv_cache_figure
from planner.outputs.plots.latency import latency_figure
from planner.outputs.plots.style import DPI, FIGSIZE
from planner.outputs.plots.throughput import throughput_figure


def write_plots(
    out_dir: Path,
    requests: dict[str, np.ndarray],
    steps: dict[str, np.ndarray],
    summary: dict,
    title: str,
    itl_ms: np.ndarray | None = None,
    num_gpu_blocks: int | None = None,
    names: tuple[str, ...] = PLOT_NAMES,
    suffix: str = "",
) -> list[Path]:
    """Write latency_cdf.png, throughput.png and kv_cache.png (or those of `names`) into out_dir; return
    their paths.

    requests: REQUEST_COLUMNS of sim.metrics (one row per completed request); steps: STEP_COLUMNS (may be
    empty; unknown columns are ignored); summary: the run's summary (used for the scenario name, SLO bounds,
    replica count and, when num_gpu_blocks is None, summary["memory"]["num_gpu_blocks"]); title: what run
    this is, e.g. "a10_qwen7b (simulated)"; itl_ms: every inter-token gap in ms, if recorded; suffix: added to each
    file's stem (a fleet's pool: "throughput_prefill.png").
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    requests = {k: np.asarray(v) for k, v in (requests or {}).items()}
    steps = {k: np.asarray(v) for k, v in (steps or {}).items()}
    summary = summary or {}
    if num_gpu_blocks is None:
        memory = summary.get("memory")
        num_gpu_blocks = memory.get("num_gpu_blocks") if isinstance(memory, dict) else None
    ctx = Context(requests, steps, summary, title)
    written = []
    for name in names:
        fig = Figure(figsize=FIGSIZE, dpi=DPI)
        FigureCanvasAgg(fig)
        if name == "latency_cdf.png":
            latency_figure(fig, ctx, itl_ms)
        elif name == "kv_cache.png":
            kv_cache_figure(fig, ctx, num_gpu_blocks)
        else:
            throughput_figure(fig, ctx)
        path = out_dir / (name.removesuffix(".png") + suffix + ".png")
        fig.savefig(path, dpi=DPI)
        written.append(path)
    return written
