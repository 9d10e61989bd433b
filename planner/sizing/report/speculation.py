"""Where speculative decoding helps and where it hurts, in `planner size`'s report: when the search sweeps
`search.candidates.engine.speculative` with `null` (off) among its configs, the recommended candidate (or, when
none meets the SLOs, the closest) is simulated under closed loops of rising users with each swept config and
without, on its own GPU, parallelism, engine and coefficients (planner/sizing/speculation_curve.py), and the
report shows mean TPOT and output throughput against load, each config's first load worse than no speculation
(the crossover) marked: a table in the terminal and report.md, a figure beside the others, the figures in
sizing.json."""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from planner.outputs.speculative import drafting_caveat, drafting_fitted
from planner.sizing.candidates import LABELS
from planner.sizing.rank import Ranking
from planner.sizing.report.figures import DPI, _png
from planner.sizing.search import Result, SizingResult
from planner.sizing.speculation_curve import USERS, WORSE, Curve, curve, table_lines

FIGURE = ("speculation_crossover.png", "Speculative decoding on and off: mean TPOT and output throughput vs load")


@dataclass(frozen=True)
class Crossover:
    candidate: str  # the label of the candidate whose engine the curves vary (its speculation settings aside)
    curves: list[Curve]  # the first: speculation off
    unfitted: tuple[str, ...] = ()  # the swept methods whose drafting the coefficients price without fitted terms

    def lines(self) -> list[str]:
        intro = (
            f"Speculative decoding on and off: {self.candidate} with each swept speculative config (closed loops,"
            " no think time; mean TPOT ms and output tokens/s per replica):"
        )
        return [intro, "", *table_lines(self.curves), *(drafting_caveat(m) for m in self.unfitted)]

    def to_dict(self) -> dict:
        off = self.curves[0]
        return {
            "candidate": self.candidate,
            "users": list(off.users),
            "curves": [
                {"label": c.label, "mean_tpot_ms": list(c.tpot_ms), "output_throughput": list(c.output_tps)}
                | ({} if c is off else {"worse_from_users": c.crossovers(off)})
                for c in self.curves
            ],
            "drafting_unfitted": list(self.unfitted),
        }


def _without_speculation(r: Result) -> tuple:
    """The candidate less its speculation setting: its layout (a data-parallel group's too), dtype and engine."""
    c = r.candidate
    return *c.layout, c.dtype, tuple((k, v) for k, v in c.settings if k != "speculative")


def speculation_crossover(out: SizingResult, ranking: Ranking, users: tuple[int, ...] = USERS) -> Crossover | None:
    """The curves of the swept speculative configs on the recommended (else the closest) candidate's engine; None
    unless the search swept engine.speculative with null and at least one config."""
    pick = ranking.recommended or (ranking.closest[0] if ranking.closest else None)
    if pick is None or "speculative" not in dict(pick.candidate.settings):
        return None
    siblings = sorted(
        (r for r in out.results if _without_speculation(r) == _without_speculation(pick)),
        key=lambda r: r.candidate.index,
    )
    configs = [dict(r.candidate.settings)["speculative"] for r in siblings]
    if None not in configs or all(c is None for c in configs):
        return None
    off = siblings[configs.index(None)]
    ons = [r for r, c in zip(siblings, configs) if c is not None]
    curves = [curve("off", off.candidate.scenario, off.candidate.coefficients, users)]
    unfitted = []
    for r in ons:
        spec = r.candidate.scenario.engine.speculative
        label = f"{spec.method} k={spec.num_speculative_tokens}"
        curves.append(curve(label, r.candidate.scenario, r.candidate.coefficients, users))
        if not drafting_fitted(spec.method, r.candidate.coefficients.to_dict()) and spec.method not in unfitted:
            unfitted.append(spec.method)
    # the label less its speculation setting (", spec off", as candidates.candidate_label writes it)
    return Crossover(off.candidate.label.replace(f", {LABELS['speculative']} off", ""), curves, tuple(unfitted))


def crossover_figure(x: Crossover, command: str) -> bytes:
    """Mean TPOT and output throughput against users, one line per config, the crossovers circled."""
    fig = Figure(figsize=(11, 4.6), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    off = x.curves[0]
    panels = (("TPOT", "tpot_ms", "mean TPOT (ms)"), ("throughput", "output_tps", "output tokens/s per replica"))
    for ax, (what, field, title) in zip(axes, panels):
        for i, c in enumerate(x.curves):
            color = "black" if c is off else f"C{i - 1}"
            values = getattr(c, field)
            ax.plot(c.users, values, "-o", color=color, ms=3.5, lw=1.4 if c is off else 1.2, label=c.label)
            if c is not off and what in c.crossovers(off):
                at = c.users.index(c.crossovers(off)[what])
                ax.plot(c.users[at], values[at], "o", ms=11, mfc="none", mec=color, mew=1.6)
                ax.annotate(f"{c.label}: worse from {c.users[at]}", (c.users[at], values[at]), fontsize=7,
                            xytext=(6, -12), textcoords="offset points", color=color)  # fmt: skip
        ax.set_xscale("log")
        if what == "TPOT":  # from a few ms at one user to tens of ms at saturation
            ax.set_yscale("log")
        ax.set_xlabel("users (closed loop)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8, frameon=False)
    crossed = any(w in c.crossovers(off) for c in x.curves[1:] for w in WORSE)
    note = "circled: the first load where a config is worse than off" if crossed else "no config is worse than off"
    fig.suptitle(f"{x.candidate}: speculation on and off ({note})", fontsize=10)
    fig.subplots_adjust(bottom=0.16, left=0.07, right=0.98, top=0.86, wspace=0.22)
    return _png(fig, command)
