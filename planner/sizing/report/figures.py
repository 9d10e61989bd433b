"""The report's figures as PNG bytes (matplotlib's object API on an Agg canvas, no pyplot state):
latency vs load per candidate with the SLO lines, cost vs capacity with the Pareto front, memory per GPU."""

from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from planner.sizing.rank import Ranking
from planner.sizing.search import Result, SizingResult
from sim.memory import GIB

DPI = 110
MAX_CURVES = 8


def shown(out: SizingResult, ranking: Ranking) -> list[Result]:
    """The candidates the figures draw: the recommendation, the runner-ups, then the closest misses."""
    picks = ([ranking.recommended] if ranking.recommended else []) + [r for r, _ in ranking.runner_ups]
    picks += [r for r in ranking.closest if r not in picks]
    picks += [
        r for r in out.evaluated if r not in picks and r.candidate.gpu.name not in {p.candidate.gpu.name for p in picks}
    ]
    return picks[:MAX_CURVES]


def _png(fig: Figure, command: str) -> bytes:
    fig.text(0.01, 0.005, f"produced by: {command}", fontsize=7, color="#555555", ha="left", va="bottom")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def latency_vs_load(out: SizingResult, ranking: Ranking, command: str) -> bytes:
    """p99 TTFT and TPOT (and E2E when an E2E SLO is set) vs load; with --intervals, the 90% interval at the
    demand as a bar."""
    slo = out.question.scenario.slo
    unit = out.question.search.demand.unit
    panels = [("p99_ttft", "ttft_ms", "p99 TTFT"), ("p99_tpot", "tpot_ms", "p99 TPOT")]
    if slo.e2el_ms:
        panels.append(("p99_e2el", "e2el_ms", "p99 E2E"))
    fig = Figure(figsize=(10 if len(panels) == 2 else 13, 4.6), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels))
    bars = False
    for ax, (key, metric, title) in zip(axes, panels):
        for i, r in enumerate(shown(out, ranking)):
            probes = [p for p in r.evaluation.capacity.probes if p.latency_ms[key] is not None]
            if not probes:
                continue
            color = f"C{i}"
            ax.plot([p.load for p in probes], [p.latency_ms[key] for p in probes], "-", color=color, lw=1.2,
                    label=r.candidate.label)  # fmt: skip
            for p in probes:
                ax.plot(
                    p.load, p.latency_ms[key], "o" if p.met else "x", color=color, ms=5, mfc=color if p.met else "none"
                )
            v = r.intervals["latency_ms"][key] if r.intervals else None
            if v and v["median"] is not None:
                bars = True
                ax.errorbar(r.intervals["load"], v["median"], yerr=[[v["median"] - v["low"]], [v["high"] - v["median"]]],
                            fmt="D", color=color, ms=4, capsize=4, lw=1.5)  # fmt: skip
        for stat, bound in getattr(slo, metric).items():
            ax.axhline(bound, color="#d62728", ls="--", lw=1)
            ax.annotate(
                f"SLO {stat} {bound:g} ms",
                (0.01, bound),
                xycoords=("axes fraction", "data"),
                ha="left",
                va="bottom",
                fontsize=8,
                color="#d62728",
            )
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel(f"load per replica ({unit})")
        ax.set_ylabel(f"{title} (ms)")
        ax.set_title(f"{title} vs load", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3 if len(panels) > 2 else 2, fontsize=7, frameon=False)
    key = "o meets every SLO, x misses" + (
        f"; bars: the 90% interval over {out.interval_runs} draws at the load of the intervals table" if bars else ""
    )
    fig.text(0.5, 0.8, key, ha="center", fontsize=8, color="#333333")
    fig.subplots_adjust(top=0.74, bottom=0.16, wspace=0.28, left=0.06, right=0.98)
    return _png(fig, command)


def cost_vs_capacity(out: SizingResult, ranking: Ranking, command: str) -> bytes:
    fig = Figure(figsize=(10, 4.6), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    unit = out.question.search.demand.unit
    gpus = list(dict.fromkeys(r.candidate.gpu.name for r in ranking.feasible))
    for i, gpu in enumerate(gpus):
        rs = [r for r in ranking.feasible if r.candidate.gpu.name == gpu]
        ax.scatter([r.evaluation.capacity.load for r in rs], [r.objective_usd_per_month for r in rs], color=f"C{i}",
                   label=gpu, s=28, alpha=0.8)  # fmt: skip
        for r in rs:  # --intervals: the capacity per replica's 90% interval, at the nominal cost
            v = r.intervals["capacity_per_replica"] if r.intervals else None
            if v and v["low"] is not None:
                ax.plot([v["low"], v["high"]], [r.objective_usd_per_month] * 2, "-", marker="|", ms=9, lw=1.2,
                        color=f"C{i}", alpha=0.8)  # fmt: skip
    front = sorted(ranking.front, key=lambda r: r.evaluation.capacity.load)
    if front:
        ax.plot([r.evaluation.capacity.load for r in front], [r.objective_usd_per_month for r in front], "k--", lw=1,
                label="Pareto front (cost, p99 E2E, capacity)")  # fmt: skip
    if ranking.recommended:
        r = ranking.recommended
        ax.scatter([r.evaluation.capacity.load], [r.objective_usd_per_month], marker="*", s=260, color="gold",
                   edgecolor="black", zorder=5, label="recommended")  # fmt: skip
    if not ranking.feasible:
        ax.text(0.5, 0.5, "No candidate meets the SLOs at the demand", transform=ax.transAxes, ha="center")
    ax.set_xlabel(f"capacity per replica ({unit} within the SLOs)")
    objective = "purchase" if out.question.search.money.objective == "purchase" else "rental"
    ax.set_ylabel(f"{objective} cost for the demand ($/month)")
    title = "Cost for the demand vs capacity per replica (candidates that meet the SLOs)"
    if out.interval_runs:
        title += f"\nbars: the capacity's 90% interval over {out.interval_runs} draws"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    if ranking.feasible:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.subplots_adjust(bottom=0.16, left=0.09, right=0.74)
    return _png(fig, command)


def memory_per_gpu(out: SizingResult, ranking: Ranking, command: str) -> bytes:
    picks = shown(out, ranking)
    fig = Figure(figsize=(10, 1.2 + 0.45 * max(len(picks), 1)), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    parts = (
        ("weights_bytes", "weights", "#1f77b4"),
        ("activation_bytes", "activations", "#ff7f0e"),
        ("non_torch_bytes", "non-torch", "#7f7f7f"),
        ("kv_pool", "KV cache pool", "#2ca02c"),
        ("reserved", "not used (1 - utilisation)", "#dddddd"),
    )
    for y, r in enumerate(picks):
        m = r.memory
        values = {
            **m,
            "kv_pool": m["num_gpu_blocks"] * m["block_bytes"],
            "reserved": m["total_bytes"] - m["usable_bytes"],
        }
        left = 0.0
        for key, label, color in parts:
            width = values[key] / GIB
            ax.barh(y, width, left=left, color=color, label=label if y == 0 else None)
            left += width
    ax.set_yticks(range(len(picks)), [r.candidate.label for r in picks], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("GiB per GPU (memory model)")
    ax.set_title("Memory per GPU: weights / activations / non-torch / KV cache", fontsize=10, pad=24)
    ax.legend(fontsize=7, ncol=5, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.subplots_adjust(left=0.42, right=0.98, bottom=0.45 if len(picks) < 3 else 0.2, top=0.8)
    return _png(fig, command)


FIGURES = (
    ("latency_vs_load.png", "Latency vs load per replica, with the SLO bounds", latency_vs_load),
    ("cost_vs_capacity.png", "Cost for the demand vs capacity per replica, and the Pareto front", cost_vs_capacity),
    ("memory_per_gpu.png", "Memory per GPU", memory_per_gpu),
)
