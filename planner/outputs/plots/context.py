"""What every figure needs from a run: its time span, its bins, the step state reduced to bins, and the
footnote and frame that every figure shares."""

from __future__ import annotations

import math
import textwrap

import numpy as np
from matplotlib.figure import Figure
from matplotlib.text import Text

from planner.outputs.plots.binning import bin_steps
from planner.outputs.plots.layout import fit_panels
from planner.outputs.plots.style import fmt_s

RATE_BINS = 100  # bins over the run for per-second rates
STATE_BINS = 400  # bins over the run for step state (queue, batch, KV use)


class Context:
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
            ends.append(finite_max(requests.get(key)))
        if self.num_steps:
            ends.append(finite_max(steps["start_s"] + steps.get("duration_s", 0.0)))
        self.t_end = max(ends)
        self.rate_width = _nice_width(self.t_end / RATE_BINS) if self.t_end > 0 else 0.0
        self.rate_bins = math.ceil(self.t_end / self.rate_width - 1e-9) if self.rate_width else 0
        self.rate_bins = max(self.rate_bins, 1)
        state_bins = min(STATE_BINS, max(self.num_steps // 4, 20))
        self.state_width = self.t_end / state_bins if self.t_end > 0 else 0.0
        self.state_bins = state_bins
        self._state = None
        self.step_order = None
        if self.num_steps > 1:
            start = np.asarray(self.steps["start_s"], dtype=np.float64)
            if not bool(np.all(start[1:] >= start[:-1])):  # e.g. replicas recording out of time order
                self.step_order = np.argsort(start, kind="stable")

    def state(self) -> dict[str, dict[str, np.ndarray]] | None:
        """num_running, num_waiting, kv_blocks_used per state bin: time-weighted mean, min, max."""
        if self._state is None and self.num_steps and self.state_width > 0:
            cols = [c for c in ("num_running", "num_waiting", "kv_blocks_used") if c in self.steps]
            self._state = bin_steps(
                self.steps, self.state_width, self.state_bins, cols, sums=("num_preemptions",), order=self.step_order
            )
        return self._state

    def footnote(self, fig: Figure, extra: str = "") -> Text:
        parts = [f"Scenario: {self.scenario_name}"]
        if self.mode:
            parts.append(f"mode: {self.mode}")
        parts.append(f"{self.num_requests:,} request{'' if self.num_requests == 1 else 's'} completed")
        if self.t_end > 0:
            parts.append(f"run length {fmt_s(self.t_end)}")
        if self.replicas > 1:
            parts.append(f"{self.replicas} replicas")
        text = "   |   ".join(parts) + "      (made by planner)"
        if extra:
            text += "\n" + extra
        return fig.text(0.01, 0.008, text, fontsize=8, color="#444444", ha="left", va="bottom", linespacing=1.5)


def _len(a) -> int:
    return 0 if a is None else int(np.size(a))


def finite_max(a) -> float:
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


SUPTITLE_CHARS_PER_INCH = 8.5  # 13 pt bold DejaVu Sans: a longer line is cut at the figure's edges


def finish(fig: Figure, suptitle: str, ctx: Context, extra: str = "") -> None:
    width_in = fig.get_size_inches()[0]
    lines = textwrap.wrap(suptitle, width=int(width_in * SUPTITLE_CHARS_PER_INCH), break_on_hyphens=False)
    suptitle_text = fig.suptitle("\n".join(lines), fontsize=13, fontweight="bold")
    fit_panels(fig, suptitle_text, ctx.footnote(fig, extra))


def time_axis(ax, ctx: Context) -> None:
    ax.set_xlim(0, ctx.t_end if ctx.t_end > 0 else 1.0)
    if ax.get_gid() != "note":
        ax.grid(True, alpha=0.3)
