"""docs/seed-claims.md stays equal to what the planner prints (docs/make_seed_claims.py regenerates it).

The issue: "A test keeps the memory figures in that file equal to what the planner prints." The whole page
regenerates in well under 30 s, so every row is checked, with one test per memory claim for a precise message.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
from helpers import ROOT

# Its module-scoped fixture is computed once per pytest-xdist worker: every test of the module on one worker.
pytestmark = pytest.mark.xdist_group("test_seed_claims")

DOC = ROOT / "docs" / "seed-claims.md"
SEEDS = ROOT.parent / "shared" / "seeds"  # CI: a read-only copy of shared/ beside the repository
ARTICLE_FILES = {"000": "000_2d4ecc16cb811eac.txt", "001": "001_b8ad21bfeda07981.txt"}


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_seed_claims", ROOT / "docs" / "make_seed_claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
CLAIMS = gen.load_claims()
MEMORY_IDS = [c["id"] for c in CLAIMS if c["kind"] == "memory"]


def _rows(page: str) -> dict[str, str]:
    """claim id -> its table row."""
    rows = {}
    for line in page.splitlines():
        m = re.match(r'\| <a id="([^"]+)"></a>', line)
        if m:
            rows[m.group(1)] = line
    return rows


@pytest.fixture(scope="module")
def regenerated() -> str:
    return gen.generate()


@pytest.fixture(scope="module")
def committed() -> str:
    return DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize("claim_id", MEMORY_IDS)
def test_memory_rows_match_the_planner(claim_id, regenerated, committed):
    assert _rows(committed).get(claim_id) == _rows(regenerated)[claim_id], (
        f"the {claim_id} row of docs/seed-claims.md differs from what the planner prints now: "
        "run python docs/make_seed_claims.py"
    )


def test_whole_page_matches_the_planner(regenerated, committed):
    assert committed == regenerated, "docs/seed-claims.md is out of date: run python docs/make_seed_claims.py"


def test_every_claim_is_in_the_page(committed):
    rows = _rows(committed)
    for claim in CLAIMS:
        assert claim["id"] in rows, f"claim {claim['id']} is missing from docs/seed-claims.md"
        assert claim["quote"] in rows[claim["id"]].replace("\\|", "|")
    assert len(rows) == len(CLAIMS)


def test_every_claim_has_a_check_or_a_reason():
    ids = [c["id"] for c in CLAIMS]
    assert len(ids) == len(set(ids)), "duplicate claim ids"
    for claim in CLAIMS:
        parts = gen.parts_of(claim)
        counted = [p for p in parts if "verdict" in p]
        assert counted or claim.get("not_checkable"), (
            f"{claim['id']}: no counted planner part and no not_checkable reason"
        )
        for part in parts:
            for key in ("command", "key", "label"):
                assert part.get(key), f"{claim['id']}: a planner part lacks {key!r}"
            gen.argv_of(part["command"])  # starts with `planner`
            if "command_b" in part:
                gen.argv_of(part["command_b"])
            if "verdict" in part:
                assert part["verdict"]["holds_if"] in ("within", "at_least", "at_most", "above", "below", "equals")


def test_memory_claims_are_handled():
    for claim in CLAIMS:
        if claim["kind"] == "memory":
            assert gen.parts_of(claim) or claim.get("not_checkable"), claim["id"]


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"{SEEDS} is absent (the seed articles live in shared/)")
def test_quotes_are_verbatim_in_the_articles():
    texts = {a: (SEEDS / name).read_text(encoding="utf-8") for a, name in ARTICLE_FILES.items()}
    for claim in CLAIMS:
        assert claim["quote"] in texts[claim["article"]], f"{claim['id']}: quote not found verbatim in its article"


def test_verdict_rules():
    assert gen.judge(1.0, {"holds_if": "within", "low": 0.7, "high": 1.3})
    assert not gen.judge(0.524, {"holds_if": "within", "low": 0.7, "high": 1.3})
    assert not gen.judge(1.0, {"holds_if": "above", "value": 1})
    assert gen.judge(True, {"holds_if": "equals", "value": True})
    assert gen.shown(524288, "MiB") == 0.5 and gen.shown(1500.0, "s") == 1.5 and gen.shown(0.9, "%") == 90.0
    assert gen.fmt(524288, "B", 0) == "524,288 B"
