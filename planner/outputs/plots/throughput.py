"""throughput.png: output tokens/s, requests arriving and completing per second, queue and batch over time."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from planner.outputs.plots.binning import bin_steps, output_tokens_from_requests
from planner.outputs.plots.context import Context, finish, finite_max, time_axis
from planner.outputs.plots.style import FIGSIZE, band, fmt_num, fmt_s, headroom, note, stairs, tick_fmt


def throughput_figure(fig: Figure, ctx: Context) -> None:
    fig.set_size_inches(FIGSIZE[0], 7.5)
    ax_tok, ax_req, ax_q = fig.subplots(3, 1, sharex=True)
    width, nbins = ctx.rate_width, ctx.rate_bins
    req = ctx.requests
    per = f"per {fmt_s(width)} bin" if width else ""

    ax_tok.set_title("Output tokens generated per second", fontsize=10.5)
    if ctx.t_end <= 0 or (not ctx.num_requests and not ctx.num_steps):
        note(ax_tok, "No requests completed and no engine steps recorded: nothing to plot.")
    else:
        edges = np.arange(nbins + 1) * width
        if ctx.num_steps and "num_sampled" in ctx.steps:
            tokens = bin_steps(ctx.steps, width, nbins, [], sums=("num_sampled",), order=ctx.step_order)["num_sampled"][
                "sum"
            ]
            source = "counted from engine steps"
        else:
            tokens = output_tokens_from_requests(req, edges)
            source = "estimated from requests: tokens spread evenly from first to last"
        rate = tokens / width
        ax_tok.fill_between(*stairs(edges, rate), step="post", color="#1f77b4", alpha=0.25, lw=0)
        ax_tok.plot(
            *stairs(edges, rate), drawstyle="steps-post", color="#1f77b4", lw=1.3, label=f"output tokens/s ({source})"
        )
        total = float(req["output_tokens"].sum()) if "output_tokens" in req else float(tokens.sum())
        duration = finite_max(req.get("finished_s")) or ctx.t_end
        if duration > 0:
            avg = total / duration
            ax_tok.axhline(avg, color="#d62728", ls="--", lw=1, label=f"average over run: {fmt_num(avg)} tok/s")
        ax_tok.set_ylabel(f"tokens/s\n({per})")
        ax_tok.yaxis.set_major_formatter(FuncFormatter(tick_fmt))
        headroom(ax_tok, float(rate.max()))
        ax_tok.legend(loc="upper right", fontsize=8, framealpha=0.9, ncol=2)
    time_axis(ax_tok, ctx)

    ax_req.set_title("Requests arriving and completing per second", fontsize=10.5)
    if not ctx.num_requests or ctx.t_end <= 0:
        note(ax_req, "No completed requests.")
    else:
        edges = np.arange(nbins + 1) * width
        done = np.histogram(req["finished_s"], bins=edges)[0] / width
        ax_req.plot(*stairs(edges, done), drawstyle="steps-post", color="#2ca02c", lw=1.5, label="completed requests/s")
        if "arrival_s" in req:
            arrived = np.histogram(req["arrival_s"], bins=edges)[0] / width
            ax_req.plot(
                *stairs(edges, arrived),
                drawstyle="steps-post",
                color="#7f7f7f",
                lw=1.1,
                ls="--",
                label="arriving requests/s (of those completed)",
            )
        ax_req.set_ylabel(f"requests/s\n({per})")
        ax_req.yaxis.set_major_formatter(FuncFormatter(tick_fmt))
        headroom(ax_req, float(max(done.max(), arrived.max() if "arrival_s" in req else 0.0)))
        ax_req.legend(loc="upper right", fontsize=8, framealpha=0.9, ncol=2)
    time_axis(ax_req, ctx)

    per_replica = f" (per replica, averaged over {ctx.replicas})" if ctx.replicas > 1 else ""
    ax_q.set_title("Engine load: requests waiting in the queue and running in the batch" + per_replica, fontsize=10.5)
    state = ctx.state()
    if state is None or "num_running" not in state:
        note(
            ax_q,
            "No per-step records for this run (step recording was off), so queue length and batch "
            "size over time are not available.",
        )
    else:
        band(ax_q, state, "num_running", "#1f77b4", "running (batch size)")
        if "num_waiting" in state:
            band(ax_q, state, "num_waiting", "#ff7f0e", "waiting (queue length)")
        ax_q.set_ylabel("requests")
        ax_q.yaxis.set_major_formatter(FuncFormatter(tick_fmt))
        headroom(ax_q, max(float(np.nanmax(state[c]["max"])) for c in ("num_running", "num_waiting") if c in state))
        ax_q.legend(loc="upper right", fontsize=8, framealpha=0.9, ncol=2)
    time_axis(ax_q, ctx)
    ax_q.set_xlabel("time since start of run (s)")
    for ax in (ax_tok, ax_req):
        ax.tick_params(labelbottom=ax.get_gid() != "note")
    finish(
        fig,
        f"Throughput and load over time — {ctx.title}",
        ctx,
        "lines: time-weighted mean per bin, shading: min–max within the bin",
    )
