"""The shared look of the figures: size, number and tick formatting, and the drawing helpers every panel uses
(a note in an empty panel, step lines over bins, a mean line with its min-max band)."""

from __future__ import annotations

import math

import numpy as np

FIGSIZE = (10.0, 6.0)
DPI = 110
NOTE_STYLE = {"ha": "center", "va": "center", "fontsize": 10, "color": "#555555", "wrap": True}


def fmt_num(v: float) -> str:
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


def fmt_ms(v: float) -> str:
    return f"{fmt_num(v)} ms"


def fmt_s(v: float) -> str:
    return f"{fmt_num(v)} s"


def note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, **NOTE_STYLE)
    ax.set_gid("note")  # an empty panel: no grid
    # tick_params, not set_xticks([]): the x axis may be shared with panels that do have data
    ax.tick_params(left=False, bottom=False, labelleft=False, labelbottom=False)
    for spine in ax.spines.values():
        spine.set_color("#cccccc")


def tick_fmt(x: float, _pos=None) -> str:
    """Plain tick labels: 1,000 not 1e3 or 1000.0."""
    if x == 0:
        return "0"
    if abs(x) >= 1 and float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:,.6g}" if abs(x) >= 1000 else f"{x:.6g}"


def stairs(edges: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x, y for a step line over bins (values[i] on [edges[i], edges[i+1]))."""
    return edges, np.append(values, values[-1] if len(values) else np.nan)


def headroom(ax, top: float) -> None:
    """y from 0 with room above the data for a one-row legend."""
    top = top if math.isfinite(top) and top > 0 else 1.0
    ax.set_ylim(0, top * 1.3)


def band(ax, state: dict, col: str, color: str, label: str, scale: float = 1.0) -> None:
    edges = state["edges"]
    s = state[col]
    lo = np.where(np.isnan(s["min"]), 0.0, s["min"]) * scale
    hi = np.where(np.isnan(s["max"]), 0.0, s["max"]) * scale
    ax.fill_between(edges, np.append(lo, lo[-1]), np.append(hi, hi[-1]), step="post", color=color, alpha=0.18, lw=0)
    ax.plot(
        *stairs(edges, s["mean"] * scale),
        drawstyle="steps-post",
        color=color,
        lw=1.3,
        label=f"{label}: mean (peak {fmt_num(float(np.nanmax(s['max'])) * scale)})",
    )
