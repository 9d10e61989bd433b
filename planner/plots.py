"""The three PNG plots of a run (the same for `planner simulate` and `planner run`).

    latency_cdf.png  CDFs of TTFT, TPOT, ITL and E2E latency with p50/p90/p99 (and SLO bounds) marked
    throughput.png   output tokens/s, requests arriving and completing per second, queue and batch over time
    kv_cache.png     KV-cache blocks in use (% of the pool) and batch size over time, preemptions marked

Figures are built with `matplotlib.figure.Figure` on an Agg canvas, never through pyplot, so writing plots
changes no global matplotlib state (backend, open figures, rcParams) of a caller's session. Steps can be
millions of rows: they are reduced to a few hundred time bins (time-weighted mean, min and max per bin)
with bincount/reduceat before anything is drawn. Anything missing (no requests, no multi-token request, no
step records, no ITL) leaves its panel with a note instead of failing.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

FIGSIZE = (10.0, 6.0)
DPI = 110
RATE_BINS = 100  # bins over the run for per-second rates
STATE_BINS = 400  # bins over the run for step state (queue, batch, KV use)
CDF_POINTS = 200_000  # larger samples are subsampled for the drawn curve (percentiles stay exact)
PERCENTILE_COLORS = {50: "#2ca02c", 90: "#ff7f0e", 99: "#d62728"}
NOTE_STYLE = {"ha": "center", "va": "center", "fontsize": 10, "color": "#555555", "wrap": True}


def write_plots(
    out_dir: Path,
    requests: dict[str, np.ndarray],
    steps: dict[str, np.ndarray],
    summary: dict,
    title: str,
    itl_ms: np.ndarray | None = None,
    num_gpu_blocks: int | None = None,
) -> list[Path]:
    """Write latency_cdf.png, throughput.png and kv_cache.png into out_dir; return their paths.

    requests: REQUEST_COLUMNS of sim.metrics (one row per completed request); steps: STEP_COLUMNS (may be
    empty; unknown columns are ignored); summary: the run's summary (used for the scenario name, SLO bounds,
    replica count and, when num_gpu_blocks is None, summary["memory"]["num_gpu_blocks"]); title: what run
    this is, e.g. "a10_qwen7b (simulated)"; itl_ms: every inter-token gap in ms, if recorded.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    requests = {k: np.asarray(v) for k, v in (requests or {}).items()}
    steps = {k: np.asarray(v) for k, v in (steps or {}).items()}
    summary = summary or {}
    if num_gpu_blocks is None:
        memory = summary.get("memory")
        num_gpu_blocks = memory.get("num_gpu_blocks") if isinstance(memory, dict) else None
    ctx = _Context(requests, steps, summary, title)
    written = []
    for name, draw in (
        ("latency_cdf.png", _latency_figure),
        ("throughput.png", _throughput_figure),
        ("kv_cache.png", _kv_figure),
    ):
        fig = Figure(figsize=FIGSIZE, dpi=DPI)
        FigureCanvasAgg(fig)
        if name == "latency_cdf.png":
            draw(fig, ctx, itl_ms)
        elif name == "kv_cache.png":
            draw(fig, ctx, num_gpu_blocks)
        else:
            draw(fig, ctx)
        path = out_dir / name
        fig.savefig(path, dpi=DPI)
        written.append(path)
    return written


# ----------------------------------------------------------------------------------------------- data prep


class _Context:
    """What every figure needs: the run's time span, its bins, and the step series reduced to bins."""

    def __init__(self, requests: dict, steps: dict, summary: dict, title: str) -> None:
        self.requests = requests
        self.summary = summary
        self.title = title
        self.scenario_name = summary.get("scenario_name") or title
        self.mode = summary.get("mode")
        hardware = (summary.get("scenario") or {}).get("hardware") or {}
        self.replicas = int(hardware.get("replicas") or 1)
        self.num_requests = _len(requests.get("request_id", requests.get("finished_s")))
        self.num_steps = _len(steps.get("start_s"))
        self.steps = steps if self.num_steps else {}
        ends = [0.0]
        for key in ("arrival_s", "first_token_s", "finished_s"):
            ends.append(_finite_max(requests.get(key)))
        if self.num_steps:
            ends.append(_finite_max(steps["start_s"] + steps.get("duration_s", 0.0)))
        self.t_end = max(ends)
        self.rate_width = _nice_width(self.t_end / RATE_BINS) if self.t_end > 0 else 0.0
        self.rate_bins = math.ceil(self.t_end / self.rate_width - 1e-9) if self.rate_width else 0
        self.rate_bins = max(self.rate_bins, 1)
        state_bins = min(STATE_BINS, max(self.num_steps // 4, 20))
        self.state_width = self.t_end / state_bins if self.t_end > 0 else 0.0
        self.state_bins = state_bins
        self._state = None
        self._order = None
        if self.num_steps > 1:
            start = np.asarray(self.steps["start_s"], dtype=np.float64)
            if not bool(np.all(start[1:] >= start[:-1])):  # e.g. replicas recording out of time order
                self._order = np.argsort(start, kind="stable")

    def state(self) -> dict[str, dict[str, np.ndarray]] | None:
        """num_running, num_waiting, kv_blocks_used per state bin: time-weighted mean, min, max."""
        if self._state is None and self.num_steps and self.state_width > 0:
            cols = [c for c in ("num_running", "num_waiting", "kv_blocks_used") if c in self.steps]
            self._state = _bin_steps(
                self.steps, self.state_width, self.state_bins, cols, sums=("num_preemptions",), order=self._order
            )
        return self._state

    def footnote(self, fig: Figure, extra: str = "") -> None:
        parts = [f"Scenario: {self.scenario_name}"]
        if self.mode:
            parts.append(f"mode: {self.mode}")
        parts.append(f"{self.num_requests:,} request{'' if self.num_requests == 1 else 's'} completed")
        if self.t_end > 0:
            parts.append(f"run length {_fmt_s(self.t_end)}")
        if self.replicas > 1:
            parts.append(f"{self.replicas} replicas")
        text = "   |   ".join(parts) + "      (made by planner)"
        if extra:
            text += "\n" + extra
        fig.text(0.01, 0.008, text, fontsize=8, color="#444444", ha="left", va="bottom", linespacing=1.5)


def _len(a) -> int:
    return 0 if a is None else int(np.size(a))


def _finite_max(a) -> float:
    if a is None or np.size(a) == 0:
        return 0.0
    a = np.asarray(a, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.max()) if a.size else 0.0


def _nice_width(raw: float) -> float:
    """The smallest 1-2-5 x 10^k at least raw."""
    exp = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        w = m * 10.0**exp
        if w >= raw * (1 - 1e-9):
            return w
    return 10.0 ** (exp + 1)


def _bin_steps(
    steps: dict, width: float, nbins: int, cols: list[str], sums: tuple[str, ...] = (), order: np.ndarray | None = None
) -> dict:
    """Reduce steps to time bins by start time. For each of `cols`: 'mean' (weighted by step duration; 0
    where the engine ran no step in the bin, i.e. was idle), 'min', 'max' (NaN where empty); for each of
    `sums`: 'sum'. Also 'edges' (nbins + 1). Steps in time order (one replica) cost a few passes over each
    column; otherwise pass `order` (an argsort of start_s) or one is computed."""
    start = np.asarray(steps["start_s"], dtype=np.float64)
    if order is None and len(start) > 1 and not bool(np.all(start[1:] >= start[:-1])):
        order = np.argsort(start, kind="stable")

    def sorted_col(name: str) -> np.ndarray:
        col = np.asarray(steps[name])
        return col if order is None else col[order]

    start = start if order is None else start[order]
    edges = np.arange(nbins + 1) * width
    first = np.searchsorted(start, edges[:-1], side="left")
    first[0] = 0  # anything before 0 (should not happen) goes to the first bin
    last = np.append(first[1:], len(start))  # anything past the end goes to the last bin
    nonempty = last > first
    bounds = first[nonempty]
    out: dict = {"edges": edges}
    if cols:
        dur = sorted_col("duration_s").astype(np.float64) if "duration_s" in steps else np.zeros(len(start))
        w = np.maximum(dur, 1e-12)  # zero-length steps still count (equally) in an otherwise empty bin
        wsum = np.add.reduceat(w, bounds) if len(bounds) else np.empty(0)
    for col in cols:
        x = sorted_col(col)
        mean = np.zeros(nbins)
        lo = np.full(nbins, np.nan)
        hi = np.full(nbins, np.nan)
        if len(bounds):
            mean[nonempty] = np.add.reduceat(x * w, bounds) / wsum
            lo[nonempty] = np.minimum.reduceat(x, bounds)
            hi[nonempty] = np.maximum.reduceat(x, bounds)
        out[col] = {"mean": mean, "min": lo, "max": hi}
    for col in sums:
        if col in steps:
            total = np.zeros(nbins)
            if len(bounds):
                total[nonempty] = np.add.reduceat(sorted_col(col).astype(np.float64), bounds)
            out[col] = {"sum": total}
    return out


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


def _output_tokens_from_requests(requests: dict, edges: np.ndarray) -> np.ndarray:
    """Tokens emitted per bin, estimated from requests alone: the first at first_token_s, the other
    output_tokens - 1 spread evenly up to finished_s. O(n log n) via sorted cumulative sums."""
    if not all(k in requests for k in ("first_token_s", "finished_s", "output_tokens")):
        return np.zeros(len(edges) - 1)
    f = requests["first_token_s"].astype(np.float64)
    e = requests["finished_s"].astype(np.float64)
    n = requests["output_tokens"].astype(np.float64)
    ok = np.isfinite(f) & np.isfinite(e) & (n >= 1)
    f, e, n = f[ok], e[ok], n[ok]
    rest = n - 1
    span = e - f
    ramp = (span > 0) & (rest > 0)
    # point masses: the first token of every request, and the rest where there is no span to spread over
    cum = _cumulative_points(f, np.ones_like(f), edges)
    cum += _cumulative_points(e[~ramp], rest[~ramp], edges)
    # ramps: C(t) = sum_{f_i < t} r_i (t - f_i) - sum_{e_i < t} r_i (t - e_i)
    r = rest[ramp] / span[ramp]
    for points, sign in ((f[ramp], 1.0), (e[ramp], -1.0)):
        order = np.argsort(points)
        p, rr = points[order], r[order]
        cr = np.concatenate([[0.0], np.cumsum(rr)])
        crp = np.concatenate([[0.0], np.cumsum(rr * p)])
        k = np.searchsorted(p, edges, side="left")
        cum += sign * (edges * cr[k] - crp[k])
    return np.maximum(np.diff(cum), 0.0)


def _cumulative_points(t: np.ndarray, mass: np.ndarray, edges: np.ndarray) -> np.ndarray:
    order = np.argsort(t)
    c = np.concatenate([[0.0], np.cumsum(mass[order])])
    return c[np.searchsorted(t[order], edges, side="right")]


# ------------------------------------------------------------------------------------------------ helpers


def _fmt_num(v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    a = abs(v)
    if float(v).is_integer():
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a == 0:
        return "0"
    return f"{v:.3g}"


def _fmt_ms(v: float) -> str:
    return f"{_fmt_num(v)} ms"


def _fmt_s(v: float) -> str:
    return f"{_fmt_num(v)} s"


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, **NOTE_STYLE)
    ax.set_gid("note")  # an empty panel: no grid
    # tick_params, not set_xticks([]): the x axis may be shared with panels that do have data
    ax.tick_params(left=False, bottom=False, labelleft=False, labelbottom=False)
    for spine in ax.spines.values():
        spine.set_color("#cccccc")


def _tick_fmt(x: float, _pos=None) -> str:
    """Plain tick labels: 1,000 not 1e3 or 1000.0."""
    if x == 0:
        return "0"
    if abs(x) >= 1 and float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:,.6g}" if abs(x) >= 1000 else f"{x:.6g}"


def _finish(fig: Figure, suptitle: str, ctx: _Context, extra: str = "") -> None:
    fig.suptitle(suptitle, fontsize=13, fontweight="bold")
    ctx.footnote(fig, extra)
    fig.tight_layout(rect=(0, 0.055, 1, 0.965))


def _time_axis(ax, ctx: _Context) -> None:
    ax.set_xlim(0, ctx.t_end if ctx.t_end > 0 else 1.0)
    if ax.get_gid() != "note":
        ax.grid(True, alpha=0.3)


def _stairs(edges: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x, y for a step line over bins (values[i] on [edges[i], edges[i+1]))."""
    return edges, np.append(values, values[-1] if len(values) else np.nan)


# ----------------------------------------------------------------------------------------------- latency


def _latency_figure(fig: Figure, ctx: _Context, itl_ms: np.ndarray | None) -> None:
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
            _note(ax, why_empty)
            continue
        counted = unit if len(values) != 1 else unit.removesuffix("s")
        ax.set_title(f"{name}: {len(values):,} {counted}, mean {_fmt_ms(float(values.mean()))}", fontsize=10)
        _cdf_panel(ax, values, xlabel, unit, slo.get(metric, []))
    _finish(
        fig,
        f"Latency distributions (CDF) — {ctx.title}",
        ctx,
        "each curve: the share of requests (ITL: of token gaps) with a latency at or below x; "
        "dots: percentiles; grey dash-dot: mean; purple dashed: SLO bound",
    )


def _cdf_panel(ax, values: np.ndarray, xlabel: str, unit: str, slo_checks: list[dict]) -> None:
    n = len(values)
    p = np.percentile(values, [50, 90, 99])
    mean = float(values.mean())
    curve = values
    if n > CDF_POINTS:
        curve = np.random.default_rng(0).choice(values, CDF_POINTS, replace=False)
    curve = np.sort(curve)
    y = np.arange(1, len(curve) + 1) / len(curve)
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
        ax.xaxis.set_major_formatter(FuncFormatter(_tick_fmt))
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        lo_all, hi_all = min(span), max(span)
        pad = (hi_all - lo_all) * 0.05 or max(abs(hi_all) * 0.1, 1e-3)
        xlim = (min(0.0, lo_all - pad) if lo_all >= 0 and lo_all < pad * 4 else lo_all - pad, hi_all + pad)
        ax.xaxis.set_major_formatter(FuncFormatter(_tick_fmt))
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
        if labels and _fmt_ms(labels[-1][1]) == _fmt_ms(v):
            labels[-1][0].append(q)
        else:
            labels.append(([q], float(v)))
    for qs, v in labels:
        q = qs[-1]
        color = PERCENTILE_COLORS[q]
        right = frac(v) < 0.4 if (v > 0 or not use_log) else True
        text = " = ".join(f"p{k}" for k in qs) + f" = {_fmt_ms(v)}"
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
            f"SLO: {c.get('stat')} ≤ {_fmt_ms(bound)}{verdict}",
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


# -------------------------------------------------------------------------------------------- throughput


def _throughput_figure(fig: Figure, ctx: _Context) -> None:
    fig.set_size_inches(FIGSIZE[0], 7.5)
    ax_tok, ax_req, ax_q = fig.subplots(3, 1, sharex=True)
    width, nbins = ctx.rate_width, ctx.rate_bins
    req = ctx.requests
    per = f"per {_fmt_s(width)} bin" if width else ""

    ax_tok.set_title("Output tokens generated per second", fontsize=10.5)
    if ctx.t_end <= 0 or (not ctx.num_requests and not ctx.num_steps):
        _note(ax_tok, "No requests completed and no engine steps recorded: nothing to plot.")
    else:
        edges = np.arange(nbins + 1) * width
        if ctx.num_steps and "num_sampled" in ctx.steps:
            tokens = _bin_steps(ctx.steps, width, nbins, [], sums=("num_sampled",), order=ctx._order)["num_sampled"][
                "sum"
            ]
            source = "counted from engine steps"
        else:
            tokens = _output_tokens_from_requests(req, edges)
            source = "estimated from requests: tokens spread evenly from first to last"
        rate = tokens / width
        ax_tok.fill_between(*_stairs(edges, rate), step="post", color="#1f77b4", alpha=0.25, lw=0)
        ax_tok.plot(
            *_stairs(edges, rate), drawstyle="steps-post", color="#1f77b4", lw=1.3, label=f"output tokens/s ({source})"
        )
        total = float(req["output_tokens"].sum()) if "output_tokens" in req else float(tokens.sum())
        duration = _finite_max(req.get("finished_s")) or ctx.t_end
        if duration > 0:
            avg = total / duration
            ax_tok.axhline(avg, color="#d62728", ls="--", lw=1, label=f"average over run: {_fmt_num(avg)} tok/s")
        ax_tok.set_ylabel(f"tokens/s\n({per})")
        ax_tok.yaxis.set_major_formatter(FuncFormatter(_tick_fmt))
        _headroom(ax_tok, float(rate.max()))
        ax_tok.legend(loc="upper right", fontsize=8, framealpha=0.9, ncol=2)
    _time_axis(ax_tok, ctx)

    ax_req.set_title("Requests arriving and completing per second", fontsize=10.5)
    if not ctx.num_requests or ctx.t_end <= 0:
        _note(ax_req, "No completed requests.")
    else:
        edges = np.arange(nbins + 1) * width
        done = np.histogram(req["finished_s"], bins=edges)[0] / width
        ax_req.plot(
            *_stairs(edges, done), drawstyle="steps-post", color="#2ca02c", lw=1.5, label="completed requests/s"
        )
        if "arrival_s" in req:
            arrived = np.histogram(req["arrival_s"], bins=edges)[0] / width
            ax_req.plot(
                *_stairs(edges, arrived),
                drawstyle="steps-post",
                color="#7f7f7f",
                lw=1.1,
                ls="--",
                label="arriving requests/s (of those completed)",
            )
        ax_req.set_ylabel(f"requests/s\n({per})")
        ax_req.yaxis.set_major_formatter(FuncFormatter(_tick_fmt))
        _headroom(ax_req, float(max(done.max(), arrived.max() if "arrival_s" in req else 0.0)))
        ax_req.legend(loc="upper right", fontsize=8, framealpha=0.9, ncol=2)
    _time_axis(ax_req, ctx)

    per_replica = f" (per replica, averaged over {ctx.replicas})" if ctx.replicas > 1 else ""
    ax_q.set_title("Engine load: requests waiting in the queue and running in the batch" + per_replica, fontsize=10.5)
    state = ctx.state()
    if state is None or "num_running" not in state:
        _note(
            ax_q,
            "No per-step records for this run (step recording was off), so queue length and batch "
            "size over time are not available.",
        )
    else:
        _band(ax_q, state, "num_running", "#1f77b4", "running (batch size)")
        if "num_waiting" in state:
            _band(ax_q, state, "num_waiting", "#ff7f0e", "waiting (queue length)")
        ax_q.set_ylabel("requests")
        ax_q.yaxis.set_major_formatter(FuncFormatter(_tick_fmt))
        _headroom(ax_q, max(float(np.nanmax(state[c]["max"])) for c in ("num_running", "num_waiting") if c in state))
        ax_q.legend(loc="upper right", fontsize=8, framealpha=0.9, ncol=2)
    _time_axis(ax_q, ctx)
    ax_q.set_xlabel("time since start of run (s)")
    for ax in (ax_tok, ax_req):
        ax.tick_params(labelbottom=ax.get_gid() != "note")
    _finish(
        fig,
        f"Throughput and load over time — {ctx.title}",
        ctx,
        "lines: time-weighted mean per bin, shading: min–max within the bin",
    )


def _headroom(ax, top: float) -> None:
    """y from 0 with room above the data for a one-row legend."""
    top = top if math.isfinite(top) and top > 0 else 1.0
    ax.set_ylim(0, top * 1.3)


def _band(ax, state: dict, col: str, color: str, label: str, scale: float = 1.0) -> None:
    edges = state["edges"]
    s = state[col]
    lo = np.where(np.isnan(s["min"]), 0.0, s["min"]) * scale
    hi = np.where(np.isnan(s["max"]), 0.0, s["max"]) * scale
    ax.fill_between(edges, np.append(lo, lo[-1]), np.append(hi, hi[-1]), step="post", color=color, alpha=0.18, lw=0)
    ax.plot(
        *_stairs(edges, s["mean"] * scale),
        drawstyle="steps-post",
        color=color,
        lw=1.3,
        label=f"{label}: mean (peak {_fmt_num(float(np.nanmax(s['max'])) * scale)})",
    )


# ----------------------------------------------------------------------------------------------- KV cache


def _kv_figure(fig: Figure, ctx: _Context, num_gpu_blocks: int | None) -> None:
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
        _note(
            ax_kv,
            "No per-step records for this run (step recording was off), so KV-cache use over time is not available.",
        )
    else:
        scale = 100.0 / num_gpu_blocks if num_gpu_blocks else 1.0
        _band(ax_kv, state, "kv_blocks_used", "#9467bd", "KV blocks used" if not num_gpu_blocks else "% used", scale)
        if num_gpu_blocks:
            ax_kv.axhline(100, color="#d62728", ls="--", lw=1, label="pool full (100%)")
            ax_kv.set_ylim(0, 135)  # the band above 100% holds the preemption marks and the legend
            ax_kv.set_yticks([0, 20, 40, 60, 80, 100])
            ax_kv.set_ylabel("% of KV blocks used")
            top = 106.0
        else:
            ax_kv.set_ylabel("KV blocks used")
            ax_kv.yaxis.set_major_formatter(FuncFormatter(_tick_fmt))
            peak = float(np.nanmax(state["kv_blocks_used"]["max"]))
            _headroom(ax_kv, peak)
            top = peak * 1.06
        _mark_preemptions(ax_kv, state, top, preempt_total)
        ax_kv.legend(loc="upper left", fontsize=8, framealpha=0.9, ncol=3)
    _time_axis(ax_kv, ctx)

    ax_b.set_title("Batch size: requests running in each engine step" + per_replica, fontsize=10.5)
    if state is None or "num_running" not in state:
        _note(ax_b, "No per-step records for this run, so batch size over time is not available.")
    else:
        _band(ax_b, state, "num_running", "#1f77b4", "running requests")
        ax_b.set_ylabel("requests in batch")
        ax_b.yaxis.set_major_formatter(FuncFormatter(_tick_fmt))
        peak = max(float(np.nanmax(state["num_running"]["max"])), 1.0)
        _headroom(ax_b, peak)
        _mark_preemptions(ax_b, state, peak * 1.06, preempt_total)
        ax_b.legend(loc="upper left", fontsize=8, framealpha=0.9, ncol=2)
    _time_axis(ax_b, ctx)
    ax_b.set_xlabel("time since start of run (s)")
    ax_kv.tick_params(labelbottom=ax_kv.get_gid() != "note")
    extra = f"{preempt_total:,} preemptions" if preempt_total else "no preemptions"
    _finish(
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
