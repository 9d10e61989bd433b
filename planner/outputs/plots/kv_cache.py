"""kv_cache.png: KV-cache blocks in use (% of the pool) and batch size over time, preemptions marked."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from planner.outputs.plots.context import Context, finish, time_axis
from planner.outputs.plots.style import band, headroom, note, tick_fmt


def kv_cache_figure(fig: Figure, ctx: Context, num_gpu_blocks: int | None) -> None:
    ax_kv, ax_b = fig.subplots(2, 1, sharex=True)
    state = ctx.state()
    per_replica = " (per replica, averaged)" if ctx.replicas > 1 else ""
    preempt_total = int(np.sum(ctx.requests.get("preemptions", 0))) if ctx.num_requests else 0
    if state is not None and "num_preemptions" in state:
        preempt_total = int(state["num_preemptions"]["sum"].sum())

    if num_gpu_blocks:
        ax_kv.set_title(
            f"KV cache in use: % of the pool of {int(num_gpu_blocks):,} blocks" + per_replica, fontsize=10.5
        )
    else:
        ax_kv.set_title("KV cache blocks in use (pool size unknown)" + per_replica, fontsize=10.5)
    if state is None or "kv_blocks_used" not in state:
        note(
            ax_kv,
            "No per-step records for this run (step recording was off), so KV-cache use over time is not available.",
        )
    else:
        scale = 100.0 / num_gpu_blocks if num_gpu_blocks else 1.0
        band(ax_kv, state, "kv_blocks_used", "#9467bd", "KV blocks used" if not num_gpu_blocks else "% used", scale)
        if num_gpu_blocks:
            ax_kv.axhline(100, color="#d62728", ls="--", lw=1, label="pool full (100%)")
            ax_kv.set_ylim(0, 135)  # the band above 100% holds the preemption marks and the legend
            ax_kv.set_yticks([0, 20, 40, 60, 80, 100])
            ax_kv.set_ylabel("% of KV blocks used")
            top = 106.0
        else:
            ax_kv.set_ylabel("KV blocks used")
            ax_kv.yaxis.set_major_formatter(FuncFormatter(tick_fmt))
            peak = float(np.nanmax(state["kv_blocks_used"]["max"]))
            headroom(ax_kv, peak)
            top = peak * 1.06
        _mark_preemptions(ax_kv, state, top, preempt_total)
        ax_kv.legend(loc="upper left", fontsize=8, framealpha=0.9, ncol=3)
    time_axis(ax_kv, ctx)

    ax_b.set_title("Batch size: requests running in each engine step" + per_replica, fontsize=10.5)
    if state is None or "num_running" not in state:
        note(ax_b, "No per-step records for this run, so batch size over time is not available.")
    else:
        band(ax_b, state, "num_running", "#1f77b4", "running requests")
        ax_b.set_ylabel("requests in batch")
        ax_b.yaxis.set_major_formatter(FuncFormatter(tick_fmt))
        peak = max(float(np.nanmax(state["num_running"]["max"])), 1.0)
        headroom(ax_b, peak)
        _mark_preemptions(ax_b, state, peak * 1.06, preempt_total)
        ax_b.legend(loc="upper left", fontsize=8, framealpha=0.9, ncol=2)
    time_axis(ax_b, ctx)
    ax_b.set_xlabel("time since start of run (s)")
    ax_kv.tick_params(labelbottom=ax_kv.get_gid() != "note")
    extra = f"{preempt_total:,} preemptions" if preempt_total else "no preemptions"
    finish(
        fig,
        f"KV-cache memory and batch size over time — {ctx.title}",
        ctx,
        extra + "; lines: time-weighted mean per bin, shading: min–max within the bin",
    )


def _mark_preemptions(ax, state: dict, top: float, total: int) -> None:
    """A red triangle above the data in every bin that had a preemption."""
    if "num_preemptions" not in state:
        return
    counts = state["num_preemptions"]["sum"]
    hit = np.nonzero(counts > 0)[0]
    if not len(hit):
        return
    edges = state["edges"]
    centers = (edges[hit] + edges[hit + 1]) / 2
    ax.plot(
        centers,
        np.full(len(centers), top),
        "v",
        color="#d62728",
        ms=5,
        alpha=0.8,
        label=f"bin with preemptions ({total:,} in total)",
    )
