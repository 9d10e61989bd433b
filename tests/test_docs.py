"""The manual (README.md and docs/*.md) says what the product does now: its generated parts equal what
docs/make_docs.py makes of the code, every output block equals what its command prints, every relative link and
anchor resolves, and no page tells history."""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

import pytest
from helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_docs", ROOT / "docs" / "make_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
BLOCKS = [
    (page, body, commands) for page in PAGES for body, commands in gen.output_blocks(page.read_text(encoding="utf-8"))
]
STALE = "stale: run `python docs/make_docs.py` (and read the diff)"


@functools.cache
def printed(commands: tuple[str, ...]) -> str:
    """A block as its commands print it now (the same block on two pages runs once)."""
    return gen.run_block(commands)


def test_the_scenario_reference_is_generated_from_the_code():
    assert gen.REFERENCE.read_text(encoding="utf-8") == gen.scenario_reference(), STALE


@pytest.mark.parametrize(
    ("page", "body", "commands"),
    BLOCKS,
    ids=[f"{page.relative_to(ROOT)}: {commands[-1]}" for page, _, commands in BLOCKS],
)
def test_each_output_block_is_what_its_commands_print(page, body, commands):
    assert body == printed(commands), STALE


def test_the_accuracy_table_summarises_the_fidelity_pages():
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert gen.ACCURACY_TABLE.search(text), "README.md has no accuracy table"
    assert gen.refresh_accuracy(text, gen.accuracy_rows(), "docs/") == text, STALE


def _code_constants() -> list[tuple[str, str, str]]:
    """(page, the figure as the page writes it, the constant it is): the code's figures the pages quote in prose."""
    from planner.calibration import vllm_fit
    from planner.calibration.busy import MAX_OTHER_LOAD
    from planner.calibration.from_vllm import HELD_OUT_SHARE, MIN_FIT_REQUESTS
    from planner.calibration.machine_check import SLOWDOWN_LIMIT
    from planner.calibration.validate import MAX_ATTEMPTS
    from planner.outputs.plots import CDF_POINTS
    from planner.outputs.plots.workers import BACKGROUND_MIN_REQUESTS
    from planner.scenario.rules import MAX_NUM_REQUESTS
    from planner.sizing.probe import LONGEST_PROBE, UNSERVED_FRACTION
    from planner.sizing.spec_checks import MAX_CANDIDATES
    from planner.vllm_files.export import MAX_DETAILED_TOKENS
    from sim.bench import SAME_REL
    from sim.metrics import PLOT_STEP_ROWS, STEP_CHUNK_ROWS
    from sim.statistics import GapHistogram

    vllm = "calibration-from-vllm.md"
    return [
        (vllm, f"last {HELD_OUT_SHARE:.0%} (fitted on the first", "planner.calibration.from_vllm.HELD_OUT_SHARE"),
        (vllm, f"at least {MIN_FIT_REQUESTS} requests", "planner.calibration.from_vllm.MIN_FIT_REQUESTS"),
        (vllm, f"finite differences of {vllm_fit.DIFF_STEP:.0%} of each", "planner.calibration.vllm_fit.DIFF_STEP"),
        (vllm, f"moved {vllm_fit.SCREEN_STEP:.0%}: one", "planner.calibration.vllm_fit.SCREEN_STEP"),
        (vllm, f"no statistic by {vllm_fit.MIN_EFFECT:.0%}, or", "planner.calibration.vllm_fit.MIN_EFFECT"),
        (vllm, f"(under {vllm_fit.MIN_INDEPENDENT:.0%} of it", "planner.calibration.vllm_fit.MIN_INDEPENDENT"),
        (
            vllm,
            f"(central differences of {vllm_fit.COVARIANCE_STEP:.0%})",
            "planner.calibration.vllm_fit.COVARIANCE_STEP",
        ),
        (vllm, f"more than {MAX_DETAILED_TOKENS:,} output", "planner.vllm_files.export.MAX_DETAILED_TOKENS"),
        (vllm, f"errors over {vllm_fit.BOOTSTRAP_SAMPLES} bootstrap", "planner.calibration.vllm_fit.BOOTSTRAP_SAMPLES"),
        ("outputs.md", f"within {GapHistogram.RELATIVE_ERROR:.1%} of", "sim.statistics.GapHistogram.RELATIVE_ERROR"),
        ("outputs.md", f"{STEP_CHUNK_ROWS:,} steps at a time", "sim.metrics.STEP_CHUNK_ROWS"),
        ("outputs.md", f"at most {CDF_POINTS:,} points", "planner.outputs.plots.CDF_POINTS"),
        ("outputs.md", f"every step up to {PLOT_STEP_ROWS:,} steps", "sim.metrics.PLOT_STEP_ROWS"),
        ("outputs.md", f"a run of {BACKGROUND_MIN_REQUESTS:,} requests or more", "BACKGROUND_MIN_REQUESTS"),
        ("speed.md", f"a run of {BACKGROUND_MIN_REQUESTS:,} requests or more", "BACKGROUND_MIN_REQUESTS"),
        ("speed.md", f"written out {STEP_CHUNK_ROWS:,} at", "sim.metrics.STEP_CHUNK_ROWS"),
        ("speed.md", f"capped at {MAX_NUM_REQUESTS:,}", "planner.scenario.rules.MAX_NUM_REQUESTS"),
        ("speed.md", f"a relative {SAME_REL:.0e}".replace("e-0", "e-"), "sim.bench.SAME_REL"),
        ("sizing.md", f"more than {MAX_CANDIDATES:,}", "planner.sizing.spec_checks.MAX_CANDIDATES"),
        ("sizing.md", f"up to {LONGEST_PROBE}x", "planner.sizing.probe.LONGEST_PROBE"),
        ("sizing.md", f"more than {UNSERVED_FRACTION:.0%} of the second", "planner.sizing.probe.UNSERVED_FRACTION"),
        ("calibration.md", f"more than\n  {MAX_OTHER_LOAD:g} CPUs busy", "planner.calibration.busy.MAX_OTHER_LOAD"),
        (
            "calibration.md",
            f"more than {SLOWDOWN_LIMIT:.0%} slower",
            "planner.calibration.machine_check.SLOWDOWN_LIMIT",
        ),
        ("calibration.md", f"up to {MAX_ATTEMPTS} times", "planner.calibration.validate.MAX_ATTEMPTS"),
    ]


def test_the_code_constants_the_pages_quote_are_the_codes():
    stale = [
        f"docs/{page}: {constant} is no longer {said!r}"
        for page, said, constant in _code_constants()
        if said not in (ROOT / "docs" / page).read_text(encoding="utf-8")
    ]
    assert not stale, stale


def test_the_readme_stays_short_and_leads_with_the_two_commands():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 260, f"README.md has {len(lines)} lines: move detail to docs/"
    head = "\n".join(lines[:40])
    assert "pip install -e . && planner simulate scenarios/a10_qwen7b.yaml" in head
    assert "pip install -e '.[engine,dev,ray]' && pytest -n auto --dist loadgroup" in head


def _anchors(text: str) -> set[str]:
    """The anchors a page defines: GitHub's slug of each heading (a repeated one gets -1, -2, ...) and every
    explicit <a id> or <a name>."""
    found: set[str] = set(re.findall(r'<a (?:id|name)="([^"]+)"', text))
    seen: dict[str, int] = {}
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        title = re.sub(r"<[^>]+>", "", line.lstrip("#").strip())
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _links(text: str) -> list[str]:
    """The targets of a page's Markdown links outside code (code blocks and `code spans`)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return LINK.findall(prose)


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in _links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check offline
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (file.suffix != ".md" or anchor not in _anchors(file.read_text(encoding="utf-8"))):
            broken.append(f"{target}: no such anchor in {file.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page):
    assert not _broken_links(page), f"{page.relative_to(ROOT)}: {_broken_links(page)}"


def test_the_docs_tell_no_history():
    """What changed and why belongs in commit messages: the manual (README.md and every file under docs/, their
    generators included) describes the product as it is."""
    pattern = re.compile(r"this round|issue [0-9]+|blocked on")
    files = [
        ROOT / "README.md",
        *sorted(p for p in (ROOT / "docs").rglob("*") if p.is_file() and "__pycache__" not in p.parts),
    ]
    hits = [
        f"{file.relative_to(ROOT)}:{n}: {line.strip()}"
        for file in files
        for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, hits


def test_the_link_checker_finds_a_broken_link_and_a_broken_anchor(tmp_path):
    """The check above can fail: a missing file and a missing anchor are named, a link in code is not read."""
    (tmp_path / "a.md").write_text("# Title\n\n## Two words\n\n## Two words\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#two-words-1) [gone](c.md) [no anchor](a.md#three) `[code](d.md)` [self](#nowhere)\n")
    assert _broken_links(page) == [
        "c.md: no such file",
        "a.md#three: no such anchor in a.md",
        "#nowhere: no such anchor in b.md",
    ]
