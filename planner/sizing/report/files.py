"""report.md, report.html (one file: figures embedded as base64 PNG, no external asset) and sizing.json."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from planner.errors import PlannerError
from planner.sizing.rank import Ranking
from planner.sizing.report import interval_tables, tables
from planner.sizing.report.figures import FIGURES
from planner.sizing.report.layouts import data_parallel_lines
from planner.sizing.report.speculation import FIGURE as SPECULATION_FIGURE
from planner.sizing.report.topology import interval_line, topology_section
from planner.sizing.report.topology import title as topology_title
from planner.sizing.search import SizingResult

MAX_LISTED = 60  # rows of the not-simulated and cannot-run lists in the report
TEXT_NAMES = ("report.md", "report.html", "sizing.json")
MANIFEST_NAME = "llm-d-values.yaml"  # planner/sizing/llmd_values.py: the recommendation as llm-d's chart values
REPORT_NAMES = (*(name for name, _, _ in FIGURES), SPECULATION_FIGURE[0], *TEXT_NAMES, MANIFEST_NAME)


def check_report_dir(out_dir: Path) -> None:
    """--out must be writable before the search starts, not found unwritable after it: simulate's check, for
    the report's file names."""
    from planner.outputs.results import check_out_dir

    check_out_dir(out_dir, REPORT_NAMES)


def write_report(
    out_dir: Path, out: SizingResult, ranking: Ranking, command: str, data: dict, topologies=None, crossover=None
) -> list[Path]:
    """The report's files in a folder check_report_dir has passed; `topologies`: the prefill/decode units'
    comparison (planner/sizing/topology.py), when the sizing file asked for one; `crossover`: speculation on and
    off against load (planner/sizing/report/speculation.py), when the search swept it."""
    pngs = {name: (title, draw(out, ranking, command)) for name, title, draw in FIGURES}
    if crossover is not None:
        from planner.sizing.report.speculation import crossover_figure

        name, title = SPECULATION_FIGURE
        pngs[name] = (title, crossover_figure(crossover, command))
    written = [_write(out_dir, name, png) for name, (_, png) in pngs.items()]
    md = _markdown(out, ranking, command, pngs, topologies, crossover)
    page = _html(out, ranking, command, pngs, topologies, crossover)
    texts = (md, page, json.dumps(data, indent=2))
    written += [_write(out_dir, name, text) for name, text in zip(TEXT_NAMES, texts)]
    manifest = recommended_manifest(ranking, topologies)
    if manifest is not None:
        written.append(_write(out_dir, MANIFEST_NAME, manifest))
    return written


def recommended_manifest(ranking: Ranking, topologies=None) -> str | None:
    """llm-d's chart values for the cheapest deployment that meets the SLOs: the aggregated recommendation, or the
    prefill/decode units when they cost less."""
    from planner.sizing.llmd_values import llmd_values

    agg = ranking.recommended
    best = None if topologies is None else topologies.best
    if best is not None and (agg is None or best.objective_usd_per_month < agg.objective_usd_per_month):
        return llmd_values(None, 0, best.unit.scenario, best.evaluation.units)
    if agg is None:
        return None
    return llmd_values(agg.candidate.scenario, agg.evaluation.replicas)


def _write(out_dir: Path, name: str, content: bytes | str) -> Path:
    """One file; a folder that passed the check can still fail (a full disk, a file replaced since)."""
    path = out_dir / name
    try:
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    except OSError as e:
        raise PlannerError(f"--out {out_dir}: cannot write {name}: {e.strerror or e}") from None
    return path


def _sections(out: SizingResult, ranking: Ranking):
    unit = out.question.search.demand.unit
    rows = [tables.row(r, unit) for r in tables.table_results(out, ranking)]
    skipped = [[r.candidate.label, r.note] for r in tables.not_simulated(out)]
    pruned = [[p.label, p.reason] for p in out.pruned]
    return rows, skipped, pruned


def _interval_rows(out: SizingResult) -> list[list[str]]:
    unit = out.question.search.demand.unit
    return [interval_tables.interval_row(r, unit) for r in interval_tables.interval_results(out)]


def _md_table(headers, rows) -> list[str]:
    esc = [[str(c).replace("|", "\\|") for c in rw] for rw in rows]
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(rw) + " |" for rw in esc),
    ]


def _markdown(out: SizingResult, ranking: Ranking, command: str, pngs, topologies=None, crossover=None) -> str:
    rows, skipped, pruned = _sections(out, ranking)
    lines = [f"# Sizing: {out.question.scenario.name}", "", f"Produced by `{command}`.", "", "## The question", ""]
    lines += [f"- {x}" for x in tables.question_lines(out)]
    lines += ["", "## The answer", "", tables.answer(out, ranking), ""]
    lines += [f"- {x}" for x in tables.gpu_verdicts(out, ranking)]
    if ranking.runner_ups:
        lines += ["", "Runner-ups and why they lost:", ""]
        lines += [f"- {r.candidate.label} x {r.evaluation.replicas}: {why}" for r, why in ranking.runner_ups]
    if tables.cheapest_to_buy_line(ranking):
        lines += ["", tables.cheapest_to_buy_line(ranking)]
    lines += [
        "",
        "## Candidates",
        "",
        "Capacities per replica and latencies at the demand (one replica at its share).",
        "",
    ]
    lines += _md_table(tables.HEADERS, rows)
    if layouts := data_parallel_lines(out):
        lines += [
            "",
            "## Data-parallel layouts",
            "",
            "Where each layout's step time goes, at its share of the demand:",
            "",
        ]
        lines += [f"- {x}" for x in layouts]
    if interval_tables.interval_results(out):
        lines += ["", f"## Intervals (90%, {out.interval_runs} draws)", ""]
        lines += [f"- {x}" for x in interval_tables.interval_notes(out)]
        lines += [""] + _md_table(interval_tables.INTERVAL_HEADERS, _interval_rows(out))
    if topologies is not None:
        verdict, headers, unit_rows, serve, cannot = topology_section(
            topologies, ranking, out.question.search.demand.unit
        )
        lines += ["", f"## {topology_title(topologies)}", "", verdict, ""] + _md_table(headers, unit_rows)
        lines += [f"- {label}: cannot run: {why}" for label, why in cannot]
        if (line := interval_line(topologies, out.question.search.demand.unit)) is not None:
            lines += ["", line]
        if serve:
            lines += ["", "```", *serve, "```"]
    if crossover is not None:
        lines += ["", "## Speculative decoding on and off", "", *crossover.lines()]
    lines += ["", "## Figures", ""]
    for name, (title, _) in pngs.items():
        lines += [f"![{title}]({name})", "", f"*{title}. Produced by `{command}`.*", ""]
    lines += ["## Serve it", "", "```", *tables.serve_lines(ranking), "```", "", "## Assumptions", ""]
    lines += [f"- {x}" for x in tables.assumptions(out)]
    if skipped:
        lines += ["", f"## Not simulated ({len(skipped):,})", ""] + _md_table(
            ("candidate", "why"), skipped[:MAX_LISTED]
        )
    if pruned:
        lines += ["", f"## Cannot run ({len(pruned):,})", ""] + _md_table(("candidate", "why"), pruned[:MAX_LISTED])
    return "\n".join(lines) + "\n"


CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 1150px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 1.6em; }
.answer { background: #eef6ee; border-left: 4px solid #2ca02c; padding: .7em 1em; font-size: 1.05em; }
.none { background: #fbeeee; border-left-color: #d62728; }
table { border-collapse: collapse; font-size: 12.5px; width: 100%; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; position: sticky; top: 0; }
tr.meets td:last-child { color: #1d6b1d; } tr.misses td:last-child { color: #9b1c1c; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 13px; color: #555; } code, pre { font-size: 12.5px; background: #f6f6f6; }
pre { padding: .7em; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
.small { font-size: 13px; color: #555; }
"""


def _html_table(headers, rows, classes=None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        f"<tr class='{classes[i] if classes else ''}'>"
        + "".join(f"<td>{html.escape(str(c))}</td>" for c in rw)
        + "</tr>"
        for i, rw in enumerate(rows)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html(out: SizingResult, ranking: Ranking, command: str, pngs, topologies=None, crossover=None) -> str:
    rows, skipped, pruned = _sections(out, ranking)
    classes = ["meets" if r.meets else "misses" for r in tables.table_results(out, ranking)]
    e = html.escape
    parts = [
        f"<h1>Sizing: {e(out.question.scenario.name)}</h1>",
        f"<p class='small'>Produced by <code>{e(command)}</code>.</p>",
        "<h2>The question</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in tables.question_lines(out)) + "</ul>",
        f"<h2>The answer</h2><p class='answer{'' if ranking.recommended else ' none'}'>{e(tables.answer(out, ranking))}</p>",
        "<ul>" + "".join(f"<li>{e(x)}</li>" for x in tables.gpu_verdicts(out, ranking)) + "</ul>",
    ]
    if ranking.runner_ups:
        parts.append("<p>Runner-ups and why they lost:</p><ul>" + "".join(
            f"<li>{e(r.candidate.label)} x {r.evaluation.replicas}: {e(why)}</li>" for r, why in ranking.runner_ups
        ) + "</ul>")  # fmt: skip
    if tables.cheapest_to_buy_line(ranking):
        parts.append(f"<p>{e(tables.cheapest_to_buy_line(ranking))}</p>")
    parts += [
        "<h2>Candidates</h2><p class='small'>Capacity per replica; latencies at the demand (one replica at its share).</p>",
        _html_table(tables.HEADERS, rows, classes),
    ]
    if layouts := data_parallel_lines(out):
        parts.append(
            "<h2>Data-parallel layouts</h2><p>Where each layout's step time goes, at its share of the demand:</p><ul>"
            + "".join(f"<li>{e(x)}</li>" for x in layouts)
            + "</ul>"
        )
    if interval_tables.interval_results(out):
        parts += [
            f"<h2>Intervals (90%, {out.interval_runs} draws)</h2><ul>"
            + "".join(f"<li>{e(x)}</li>" for x in interval_tables.interval_notes(out))
            + "</ul>",
            _html_table(interval_tables.INTERVAL_HEADERS, _interval_rows(out)),
        ]
    if topologies is not None:
        verdict, headers, unit_rows, serve, cannot = topology_section(
            topologies, ranking, out.question.search.demand.unit
        )
        parts += [f"<h2>{e(topology_title(topologies))}</h2><p>{e(verdict)}</p>", _html_table(headers, unit_rows)]
        parts += [f"<p class='small'>{e(label)}: cannot run: {e(why)}</p>" for label, why in cannot]
        if (line := interval_line(topologies, out.question.search.demand.unit)) is not None:
            parts.append(f"<p>{e(line)}</p>")
        if serve:
            parts.append("<pre>" + e("\n".join(serve)) + "</pre>")
    if crossover is not None:
        intro, _, *table = crossover.lines()
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in table if line.startswith("| ")]
        parts += [f"<h2>Speculative decoding on and off</h2><p>{e(intro)}</p>", _html_table(rows[0], rows[2:])]
        parts += [f"<p class='small'>{e(line)}</p>" for line in table if line and not line.startswith("|")]
    parts.append("<h2>Figures</h2>")
    for title, png in pngs.values():
        data = base64.b64encode(png).decode("ascii")
        parts.append(
            f"<figure><img alt='{e(title)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{e(title)}. Produced by <code>{e(command)}</code>.</figcaption></figure>"
        )
    parts += [
        "<h2>Serve it</h2><pre>"
        + e("\n".join(tables.serve_lines(ranking)) or "(no candidate meets the SLOs)")
        + "</pre>",
        "<h2>Assumptions</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in tables.assumptions(out)) + "</ul>",
    ]
    if skipped:
        parts += [f"<h2>Not simulated ({len(skipped):,})</h2>", _html_table(("candidate", "why"), skipped[:MAX_LISTED])]
    if pruned:
        parts += [f"<h2>Cannot run ({len(pruned):,})</h2>", _html_table(("candidate", "why"), pruned[:MAX_LISTED])]
    title = e(f"Sizing: {out.question.scenario.name}")
    return (
        f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{CSS}</style></head>"
        f"<body>{''.join(parts)}</body></html>\n"
    )
