"""What `simulate` and `run` show and write: the --out folder (checked before the run) and the summary, as
text or JSON."""

from __future__ import annotations

import sys


def check_out(args) -> None:
    """--out must be writable before the run starts, not found unwritable after it."""
    from planner.outputs.results import check_out_dir

    if args.out is not None:
        check_out_dir(args.out)


def emit(args, summary: dict, recorder, title: str, extra_lines: list[str] = (), plot_workers=None) -> None:
    from planner.outputs.results import summary_json, write_outputs

    if args.out:
        written = write_outputs(args.out, summary, recorder, title, plot_workers)
    if args.json:
        sys.stdout.write(summary_json(summary))
    else:
        from planner.outputs.report import summary_lines  # here: --json prints none of the text report

        print("\n".join([*summary_lines(summary), *extra_lines]))
        if args.out:
            print(f"\nwrote {', '.join(p.name for p in written)} to {args.out}")
