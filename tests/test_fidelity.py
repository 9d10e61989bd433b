"""docs/fidelity.md is exactly what `python -m planner.fidelity` prints (as test_seed_claims does for the
seeds' page): no figure on the page that the command does not produce."""

from planner.fidelity.page import DOC_PATH, render


def test_fidelity_page_matches_the_command():
    assert DOC_PATH.read_text(encoding="utf-8") == render(), "run `python -m planner.fidelity --write`"
