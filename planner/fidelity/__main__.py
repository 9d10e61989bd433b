"""`python -m planner.fidelity`: print docs/fidelity.md, or rewrite it with `--write`."""

from __future__ import annotations

import argparse

from planner.fidelity.page import DOC_PATH, render


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m planner.fidelity", description="Print docs/fidelity.md (the shipped calibrations' evidence)."
    )
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC_PATH.name} instead of printing")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        DOC_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {DOC_PATH}")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
