"""Where the panels of a run's figure go: margins and gaps worked out from what each panel carries, in
inches, instead of matplotlib's tight_layout.

tight_layout measures the extent of every text in the figure (each tick label laid out by the font engine),
and then savefig lays them all out again to draw them: on the three figures of the 10,000-request benchmark
run, write_plots took 2.28 s of CPU with tight_layout and 1.41 s with this (best of 4, alternating, one
process). These figures have a fixed form (a grid of panels, a suptitle above, a footnote below), so the
room each text needs follows from its font size and line count, and a tick label's width from its string,
at a font's widest digit. Estimates err on the roomy side: a label may sit a little further from its panel
than tight_layout would put it, never over a neighbour (tests/test_plots.py checks every text against the
others and the figure's edges).
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text

POINTS_PER_INCH = 72.0
LINE_HEIGHT = 1.25  # a line of text is this many times its font size tall (matplotlib's linespacing 1.2, rounded up)
CHAR_WIDTH = 0.64  # DejaVu Sans' digits are 0.636 em wide, its widest common glyphs in tick labels
TICK_SPACE_PT = 3.5 + 3.5 + 1.0  # a major tick's length, its label's pad and a point of slack
LABEL_PAD_PT = 4.0 + 2.0  # matplotlib's axis-label pad and slack
TITLE_PAD_PT = 6.0 + 2.0  # matplotlib's title pad and slack
EDGE_IN = 0.12  # empty border inside the figure's edges, and between the suptitle and the top panels' titles
RIGHT_IN = 0.3  # room for the last x tick label's half that overhangs its panel


def fit_panels(fig: Figure, suptitle: Text | None, footnote: Text | None) -> None:
    """Set fig's subplot margins and gaps so every panel's title, tick labels and axis labels fit between the
    suptitle (at the top) and the footnote (at the bottom); fig.axes must be one regular grid."""
    width_in, height_in = fig.get_size_inches()
    axes = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    nrows, ncols = axes[0].get_subplotspec().get_gridspec().get_geometry()
    rows = [[ax for ax in axes if ax.get_subplotspec().rowspan.start == r] for r in range(nrows)]
    cols = [[ax for ax in axes if ax.get_subplotspec().colspan.start == c] for c in range(ncols)]

    top_in = 2 * EDGE_IN + _text_height_in(suptitle) + max(_title_in(ax) for ax in rows[0])
    bottom_in = EDGE_IN + _text_height_in(footnote) + max(_below_in(ax) for ax in rows[-1])
    left_in = EDGE_IN + max(_left_of_in(ax) for ax in cols[0])
    row_gap_in = max(
        (max(_below_in(ax) for ax in rows[r]) + max(_title_in(ax) for ax in rows[r + 1]) for r in range(nrows - 1)),
        default=0.0,
    )
    col_gap_in = max((max(_left_of_in(ax) for ax in cols[c]) for c in range(1, ncols)), default=0.0) + RIGHT_IN

    panel_height_in = (height_in - top_in - bottom_in - (nrows - 1) * row_gap_in) / nrows
    panel_width_in = (width_in - left_in - RIGHT_IN - (ncols - 1) * col_gap_in) / ncols
    fig.subplots_adjust(
        left=left_in / width_in,
        right=1 - RIGHT_IN / width_in,
        top=1 - top_in / height_in,
        bottom=bottom_in / height_in,
        hspace=row_gap_in / panel_height_in,
        wspace=col_gap_in / panel_width_in,
    )


def _text_height_in(text: Text | None) -> float:
    if text is None or not text.get_text():
        return 0.0
    num_lines = text.get_text().count("\n") + 1
    spacing = text.get_linespacing()  # a factor, or "normal" (the font's own, about 1.2)
    spacing = max(spacing, LINE_HEIGHT) if isinstance(spacing, (int, float)) else LINE_HEIGHT
    return num_lines * spacing * text.get_fontsize() / POINTS_PER_INCH


def _title_in(ax: Axes) -> float:
    """Room above a panel: its title and the title's pad."""
    return _text_height_in(ax.title) + TITLE_PAD_PT / POINTS_PER_INCH


def _below_in(ax: Axes) -> float:
    """Room below a panel: its x tick labels (when shown) and its x label."""
    room = 0.0
    if _shows_tick_labels(ax, "x"):
        room += LINE_HEIGHT * _tick_font_pt(ax, "x") / POINTS_PER_INCH + TICK_SPACE_PT / POINTS_PER_INCH
    label = _text_height_in(ax.xaxis.label)
    return room + (label + LABEL_PAD_PT / POINTS_PER_INCH if label else 0.0)


def _left_of_in(ax: Axes) -> float:
    """Room left of a panel: its widest y tick label (when shown) and its y label (rotated: its lines side by
    side)."""
    room = 0.0
    if _shows_tick_labels(ax, "y"):
        labels = ax.yaxis.major.formatter.format_ticks(_visible_ticks(ax))
        widest = max((len(label) for label in labels), default=0)
        room += widest * CHAR_WIDTH * _tick_font_pt(ax, "y") / POINTS_PER_INCH + TICK_SPACE_PT / POINTS_PER_INCH
    label = _text_height_in(ax.yaxis.label)
    return room + (label + LABEL_PAD_PT / POINTS_PER_INCH if label else 0.0)


def _visible_ticks(ax: Axes) -> list[float]:
    low, high = sorted(ax.get_ylim())
    return [tick for tick in ax.yaxis.get_majorticklocs() if low <= tick <= high]


def _shows_tick_labels(ax: Axes, axis: str) -> bool:
    side = "labelbottom" if axis == "x" else "labelleft"
    ticks = (ax.xaxis if axis == "x" else ax.yaxis).get_tick_params()
    return bool(ticks.get(side, True))


def _tick_font_pt(ax: Axes, axis: str) -> float:
    ticks = (ax.xaxis if axis == "x" else ax.yaxis).get_major_ticks(1)
    return ticks[0].label1.get_fontsize()
