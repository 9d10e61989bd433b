"""pools.png: a fleet's pools side by side over time, a line per pool: tokens computed per second, KV cache in use
(% of the pool's blocks, per replica averaged) and requests running (per replica averaged), from each pool's own
steps. Shows which pool is busy and which waits (a prefill pool's bursts, a decode pool's growing batch)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from planner.outputs.plots.binning import bin_steps
from planner.outputs.plots.context import Context, finish, time_axis
from planner.outputs.plots.style import note, stairs

BINS = 120  # time bins across the run
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def pools_figure(fig: Figure, ctx: Context, pools: list[tuple[str, dict, int | None]]) -> None:
    """`pools`: (label, its step rows, its replicas' KV blocks) per pool, in the fleet's order; `ctx` the client's
    run (its end time, title and footnote)."""
    ax_tok, ax_kv, ax_run = fig.subplots(3, 1, sharex=True)
    width = ctx.t_end / BINS if ctx.t_end > 0 else 0.0
    ax_tok.set_title("Tokens computed per second (prompt and decode tokens of its steps)", fontsize=10.5)
    ax_kv.set_title("KV cache in use: % of the pool's blocks (per replica, averaged)", fontsize=10.5)
    ax_run.set_title("Requests running in each step (per replica, averaged)", fontsize=10.5)
    drawn = False
    for (label, steps, num_blocks), color in zip(pools, COLORS * len(pools)):
        if width <= 0 or not len(steps.get("start_s", ())):
            continue
        drawn = True
        binned = bin_steps(steps, width, BINS, ["kv_blocks_used", "num_running"], sums=("num_tokens",))
        edges = binned["edges"]
        ax_tok.plot(*stairs(edges, binned["num_tokens"]["sum"] / width), drawstyle="steps-post", color=color, lw=1.3,
                    label=label)  # fmt: skip
        kv = binned["kv_blocks_used"]["mean"] * (100.0 / num_blocks if num_blocks else 1.0)
        ax_kv.plot(*stairs(edges, kv), drawstyle="steps-post", color=color, lw=1.3, label=label)
        ax_run.plot(*stairs(edges, binned["num_running"]["mean"]), drawstyle="steps-post", color=color, lw=1.3,
                    label=label)  # fmt: skip
    if not drawn:
        for ax in (ax_tok, ax_kv, ax_run):
            note(ax, "No per-step records for this run (step recording was off), so the pools over time are not shown.")
    else:
        ax_tok.set_ylabel("tokens/s")
        ax_kv.set_ylabel("% of blocks")
        ax_kv.set_ylim(0, max(105.0, float(np.nanmax(ax_kv.get_ylim()))))
        ax_run.set_ylabel("requests")
        for ax in (ax_tok, ax_kv, ax_run):
            ax.legend(loc="upper right", fontsize=8)
            ax.set_ylim(bottom=0)
    for ax in (ax_tok, ax_kv, ax_run):
        time_axis(ax, ctx)
    ax_run.set_xlabel("time since start of run (s)")
    finish(fig, f"The fleet's pools over time — {ctx.scenario_name}", ctx, "a line per pool, its own steps")
