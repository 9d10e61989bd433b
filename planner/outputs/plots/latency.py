"""latency_cdf.png: CDFs of TTFT, TPOT, ITL and E2E latency with p50/p90/p99 (and SLO bounds) marked."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from planner.outputs.plots import CDF_POINTS
from planner.outputs.plots.context import Context, finish
from planner.outputs.plots.style import fmt_ms, note, tick_fmt

PERCENTILE_COLORS = {50: "#2ca02c", 90: "#ff7f0e", 99: "#d62728"}


def latency_figure(fig: Figure, ctx: Context, itl_ms: np.ndarray | None) -> None:
    lat = _latencies_ms(ctx.requests)
    slo = {}
    for check in (ctx.summary.get("slo") or {}).get("checks") or []:
        slo.setdefault(check.get("metric"), []).append(check)
    panels = [
        (
            "ttft_ms",
            "Time to first token",
            "TTFT: time to first token (ms)",
            lat["ttft"],
            "requests",
            "No completed requests.",
        ),
        (
            "tpot_ms",
            "Time per output token",
            "TPOT: time per output token after the first (ms)",
            lat["tpot"],
            "requests",
            "No TPOT: no request produced more than one output token."
            if ctx.num_requests
            else "No completed requests.",
        ),
        (
            "itl_ms",
            "Inter-token latency",
            "ITL: gap between consecutive tokens (ms)",
            None if itl_ms is None else np.asarray(itl_ms, dtype=np.float64),
            "gaps",
            "ITL was not recorded for this run."
            if itl_ms is None
            else "No inter-token gaps (every request produced a single token).",
        ),
        (
            "e2el_ms",
            "End-to-end latency",
            "E2E: arrival to last token (ms)",
            lat["e2el"],
            "requests",
            "No completed requests.",
        ),
    ]
    axes = fig.subplots(2, 2)
    for ax, (metric, name, xlabel, values, unit, why_empty) in zip(axes.flat, panels):
        ax.set_title(name, fontsize=10.5)
        values = None if values is None else values[np.isfinite(values)]
        if values is None or len(values) == 0:
            note(ax, why_empty)
            continue
        count, mean_ms = len(values), float(values.mean())
        if metric == "itl_ms" and "mean_itl_ms" in ctx.summary:
            # itl_ms is a sample of the gaps (GapHistogram.sample_ms): the count and mean of all of them
            count = ctx.summary["total_output_tokens"] - ctx.summary["completed"]
            mean_ms = ctx.summary["mean_itl_ms"]
        counted = unit if count != 1 else unit.removesuffix("s")
        ax.set_title(f"{name}: {count:,} {counted}, mean {fmt_ms(mean_ms)}", fontsize=10)
        _cdf_panel(ax, values, xlabel, unit, slo.get(metric, []))
    finish(
        fig,
        f"Latency distributions (CDF) — {ctx.title}",
        ctx,
        "each curve: the share of requests (ITL: of token gaps) with a latency at or below x; "
        "dots: percentiles; grey dash-dot: mean; purple dashed: SLO bound",
    )


def _latencies_ms(requests: dict) -> dict[str, np.ndarray]:
    empty = np.empty(0)
    if not all(k in requests for k in ("arrival_s", "first_token_s", "finished_s")):
        return {"ttft": empty, "tpot": empty, "e2el": empty}
    arrival = requests["arrival_s"].astype(np.float64)
    ttft = (requests["first_token_s"] - arrival) * 1e3
    e2el = (requests["finished_s"] - arrival) * 1e3
    out_tokens = requests.get("output_tokens", np.ones(len(arrival), np.int64))
    multi = out_tokens > 1
    tpot = (e2el[multi] - ttft[multi]) / (out_tokens[multi] - 1)
    return {"ttft": ttft, "tpot": tpot, "e2el": e2el}


def _cdf_panel(ax, values: np.ndarray, xlabel: str, unit: str, slo_checks: list[dict]) -> None:
    n = len(values)
    p = np.percentile(values, [50, 90, 99])
    mean = float(values.mean())
    curve = np.sort(values)
    y = np.arange(1, n + 1) / n
    if n > CDF_POINTS:  # the empirical CDF at evenly spaced ranks, the first and the last included
        ranks = np.linspace(0, n - 1, CDF_POINTS).round().astype(np.int64)
        curve, y = curve[ranks], y[ranks]
    x = np.concatenate([[curve[0]], curve])
    y = np.concatenate([[0.0], y])

    bounds = [float(c["bound_ms"]) for c in slo_checks if c.get("bound_ms") is not None]
    span = [float(curve[0]), float(curve[-1])] + bounds
    positive = [v for v in span if v > 0]
    lo, hi = (min(positive), max(positive)) if positive else (0.0, 0.0)
    use_log = bool(positive) and min(span) > 0 and hi / lo >= 100
    if use_log:
        xlim = (lo / 1.5, hi * 1.5)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(tick_fmt))
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        lo_all, hi_all = min(span), max(span)
        pad = (hi_all - lo_all) * 0.05 or max(abs(hi_all) * 0.1, 1e-3)
        xlim = (min(0.0, lo_all - pad) if lo_all >= 0 and lo_all < pad * 4 else lo_all - pad, hi_all + pad)
        ax.xaxis.set_major_formatter(FuncFormatter(tick_fmt))
    ax.set_xlim(*xlim)
    ax.set_ylim(0, 1.08)
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])

    # No legend box (it would sit on the curve somewhere): the panel title gives n and the mean, and
    # every line is labelled where it is drawn.
    ax.plot(x, y, drawstyle="steps-post", color="#1f77b4", lw=1.6)
    ax.axvline(mean, color="#7f7f7f", ls="-.", lw=1)
    ax.text(
        mean, 0.015, " mean", transform=ax.get_xaxis_transform(), fontsize=7.5, color="#555555", ha="left", va="bottom"
    )

    def frac(v: float) -> float:
        if use_log:
            return (math.log(v) - math.log(xlim[0])) / (math.log(xlim[1]) - math.log(xlim[0]))
        return (v - xlim[0]) / (xlim[1] - xlim[0])

    # one label per distinct value ("p90 = p99 = 40 ms" when they coincide), left of the point where the
    # area above the curve is empty, or right of it (and below) when the point is near the left edge
    labels: list[tuple[list[int], float]] = []
    for q, v in zip((50, 90, 99), p):
        ax.plot([v], [q / 100], "o", color=PERCENTILE_COLORS[q], ms=5, zorder=5)
        ax.axvline(v, color=PERCENTILE_COLORS[q], ls=":", lw=0.9, alpha=0.7)
        if labels and fmt_ms(labels[-1][1]) == fmt_ms(v):
            labels[-1][0].append(q)
        else:
            labels.append(([q], float(v)))
    for qs, v in labels:
        q = qs[-1]
        color = PERCENTILE_COLORS[q]
        right = frac(v) < 0.4 if (v > 0 or not use_log) else True
        text = " = ".join(f"p{k}" for k in qs) + f" = {fmt_ms(v)}"
        ax.annotate(
            text,
            (v, q / 100),
            xytext=(7 if right else -7, -1 if right else 0),
            textcoords="offset points",
            ha="left" if right else "right",
            va="top" if right else "center",
            fontsize=8,
            color=color,
            fontweight="bold",
        )
    for c in slo_checks:
        met = c.get("met")
        verdict = "" if met is None else (" — met" if met else " — MISSED")
        bound = float(c["bound_ms"])
        ax.axvline(bound, color="#9467bd", ls="--", lw=1.3)
        ax.annotate(
            f"SLO: {c.get('stat')} ≤ {fmt_ms(bound)}{verdict}",
            (bound, 0.05),
            xycoords=ax.get_xaxis_transform(),
            xytext=(3, 0),
            textcoords="offset points",
            rotation=90,
            fontsize=7.5,
            color="#9467bd",
            ha="left",
            va="bottom",
        )
    ax.set_xlabel(xlabel + (" — log scale" if use_log else ""))
    ax.set_ylabel(f"fraction of {'token gaps' if unit == 'gaps' else unit} ≤ x")
    ax.grid(True, which="major", alpha=0.3)
