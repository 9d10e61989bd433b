"""What `simulate` and `run` show and write: the --out folder (checked before the run) and the summary, as
text or JSON."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from planner.errors import PlannerError

MAX_SCRAPES = 10_000  # --scrape-every: the most scrape files one run writes
SCRAPES = "vllm_scrapes"


def check_out(args) -> None:
    """--out must be writable before the run starts, not found unwritable after it; --scrape-every needs it."""
    from planner.outputs.results import check_out_dir

    if args.out is not None:
        check_out_dir(args.out)
    every = getattr(args, "scrape_every", None)
    if every is not None and not (math.isfinite(every) and every > 0):
        raise PlannerError(f"--scrape-every {every:g}: must be a number of seconds > 0")
    if every is not None and args.out is None:
        raise PlannerError(f"--scrape-every {every:g}: the scrapes are written to --out DIR/{SCRAPES}: give --out")


def refuse_fleet_scrapes(args, scenario) -> None:
    """A fleet's engines are its pools' replicas behind a router: one engine's /metrics scrapes say nothing of the
    fleet, so --scrape-every is refused with it (its --out writes the client's vllm_bench.json)."""
    if getattr(args, "scrape_every", None) is not None:
        raise PlannerError(
            f"{args.scenario}: fleet: --scrape-every writes one engine's /metrics, and a fleet runs several engines"
            " behind a router (its --out writes the client's vllm_bench.json); give a scenario of one pool"
        )


def _write_scrapes(out_dir: Path, summary: dict, recorder, every_s: float) -> Path:
    """vllm_scrapes/scrape-NNNN.prom: the engine's /metrics every `every_s` of the run, and as it ends
    (planner/vllm_files/export.py, scrape_series)."""
    from planner.vllm_files.export import scrape_series

    end_s = float(recorder.requests.view()["finished_s"].max(initial=0.0))
    if end_s / every_s + 1 > MAX_SCRAPES:
        raise PlannerError(
            f"--scrape-every {every_s:g}: a run of {end_s:,.0f} s would write {end_s / every_s + 1:,.0f} scrapes (at"
            f" most {MAX_SCRAPES:,}); scrape less often"
        )
    folder = out_dir / SCRAPES
    try:
        folder.mkdir(exist_ok=True)
        for i, text in enumerate(scrape_series(summary, recorder, every_s)):
            (folder / f"scrape-{i:04d}.prom").write_text(text)
    except OSError as e:
        raise PlannerError(f"--out {out_dir}: cannot write {SCRAPES}: {e}") from None
    return folder


def emit(
    args, summary: dict, recorder, title: str, extra_lines: list[str] = (), plot_workers=None, drafts=None
) -> None:
    """The run's report on the terminal, and with --out its files; `drafts`: a live speculative run's drafting
    rows (drafting.csv)."""
    from planner.outputs.results import summary_json, write_drafting, write_outputs

    if args.out:
        written = write_outputs(args.out, summary, recorder, title, plot_workers)
        written += [p for p in (write_drafting(args.out, drafts),) if p is not None]
        if getattr(args, "scrape_every", None) is not None:
            written.append(_write_scrapes(args.out, summary, recorder, args.scrape_every))
    if args.json:
        sys.stdout.write(summary_json(summary))
    else:
        from planner.outputs.report import summary_lines  # here: --json prints none of the text report

        print("\n".join([*summary_lines(summary), *extra_lines]))
        if args.out:
            print(f"\nwrote {', '.join(p.name for p in written)} to {args.out}")
