"""`python -m planner.fidelity`: print docs/fidelity.md, rewrite it (`--write`), or hold every tracked comparison
to its stored bound (`--check`; `--write-bounds` stores today's figures as the bounds)."""

from __future__ import annotations

import argparse
import sys

from planner.fidelity.page import DOC_PATH, render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m planner.fidelity", description="Print docs/fidelity.md (the shipped calibrations' evidence)."
    )
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC_PATH.name} instead of printing")
    parser.add_argument(
        "--check", action="store_true", help="compare every tracked figure with its bound; exit 1 naming those worse"
    )
    parser.add_argument("--write-bounds", action="store_true", help="store today's figures as the bounds")
    parser.add_argument(
        "--write-spread",
        action="store_true",
        help="store the step-time spread of unprofiled vendors and architectures (from the development set)",
    )
    args = parser.parse_args(argv)
    if args.write_spread:
        from planner.fidelity import devset_summary

        print(f"wrote {devset_summary.write_spreads()}")
        return 0
    if args.check or args.write_bounds:
        from planner.fidelity import gate

        values = gate.figures()
        if args.write_bounds:
            print(f"wrote {gate.write_bounds(values)} ({len(values)} figures)")
            return 0
        problems = gate.worse(values, gate.load_bounds())
        for line in problems:
            print(line)
        print(f"{len(values)} figures checked, {len(problems)} worse than their bounds")
        return 1 if problems else 0
    text = render()
    if args.write:
        DOC_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {DOC_PATH}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
