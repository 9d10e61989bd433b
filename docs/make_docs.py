"""Keep the manual true to the code: every figure in README.md and docs/*.md is produced here, not typed.

- docs/scenario-reference.md (docs/scenario_reference.py) is written from the code's own tables: every key the scenario loader accepts
  (the dataclasses of sim/config.py, walked as planner/scenario/validation.py walks them), its type, its default,
  what values it allows (the RULES table of planner/scenario/rules.py) and what it means (the field's comment in
  sim/config.py). A key, a default or a range changed in the code changes the page.
- Every output block of README.md and docs/*.md is rewritten from the commands it shows: in a fenced block
  ```console, each `$ COMMAND` line is followed by what COMMAND prints (stdout and stderr; `run_block` says
  where it runs), so a figure quoted there is what the planner prints today.
- README.md's accuracy table (docs/accuracy_table.py) is summarised from docs/fidelity.md and docs/vllm-fidelity.md,
  the pages their own generators keep (`python -m planner.fidelity`, `python docs/vllm_fidelity.py`).

    python docs/make_docs.py            # rewrite what is stale
    python docs/make_docs.py --check    # rewrite nothing; exit 1 naming what is stale (tests/test_docs.py)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "docs")]  # run as a script from anywhere: the checkout's packages first

from accuracy_table import ACCURACY_TABLE, accuracy_rows, refresh_accuracy  # noqa: F401 (tests/test_docs.py reads them here)
from scenario_reference import REFERENCE, scenario_reference

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMAND_TIMEOUT_S = 300
# A console block: ```console, then `$ COMMAND` lines, each followed by what it prints.
OUTPUT_BLOCK = re.compile(r"^```console\n(?P<body>\$ .*?)^```$", re.MULTILINE | re.DOTALL)


# ---------------------------------------------------------------------------------------------------------
# Output blocks


def block_commands(body: str) -> tuple[str, ...]:
    """The commands of a console block's body: its `$ ` lines."""
    return tuple(line[2:] for line in body.splitlines() if line.startswith("$ "))


def run_block(commands: tuple[str, ...]) -> str:
    """A console block's body as the commands print it now: each `$ COMMAND` line followed by what it prints
    (stdout, then stderr). The commands run in order, by bash, in one fresh folder holding a link to the
    repository's scenarios/ (so what they write stays there, and paths print as a user in the checkout types
    them), with this interpreter's folder first on PATH (its `planner` and `python`) and an empty profile folder
    (a user's own calibration profiles would change `calibration: auto`)."""
    parts = []
    with tempfile.TemporaryDirectory(prefix="planner-docs-") as folder:
        work, profiles = Path(folder) / "work", Path(folder) / "profiles"
        work.mkdir()
        profiles.mkdir()
        (work / "scenarios").symlink_to(REPO / "scenarios")
        env = dict(
            os.environ,
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            PLANNER_PROFILE_DIR=str(profiles),
            PYTHONHASHSEED="0",
            COLUMNS="120",
        )
        for command in commands:
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", command],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
            printed = (done.stdout + done.stderr).rstrip("\n")
            parts.append(f"$ {command}" + (f"\n{printed}" if printed else ""))
    return "\n".join(parts) + "\n"


def refresh_outputs(text: str, run: Callable[[tuple[str, ...]], str] = run_block) -> str:
    """text with every console block's outputs replaced by what its commands print now."""
    return OUTPUT_BLOCK.sub(lambda m: f"```console\n{run(block_commands(m['body']))}```", text)


def output_blocks(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(body, commands) of every console block of a page."""
    return [(m["body"], block_commands(m["body"])) for m in OUTPUT_BLOCK.finditer(text)]


# ---------------------------------------------------------------------------------------------------------


def expected_pages() -> dict[Path, str]:
    """Every page this script keeps, as it should read now."""
    pages = {REFERENCE: scenario_reference()}
    accuracy = accuracy_rows()
    for page in PAGES:
        if page == REFERENCE:
            continue
        text = page.read_text(encoding="utf-8")
        prefix = "" if page.parent.name == "docs" else "docs/"
        pages[page] = refresh_accuracy(refresh_outputs(text), accuracy, prefix)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    stale = []
    for page, text in expected_pages().items():
        current = page.read_text(encoding="utf-8") if page.exists() else None
        if current == text:
            continue
        stale.append(page.relative_to(REPO))
        if not args.check:
            page.write_text(text, encoding="utf-8")
    verb = "stale" if args.check else "rewrote"
    print(f"{verb}: {', '.join(map(str, stale))}" if stale else "every page is current")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
