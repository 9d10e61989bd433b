"""The fidelity gate in CI: every tracked comparison (profile fits, transfer folds, public figures, the
development set) within the bound stored for it; a change that makes one worse fails here, naming it."""

from __future__ import annotations

from planner.fidelity import gate


def test_no_tracked_figure_is_worse_than_its_bound():
    problems = gate.worse(gate.figures(), gate.load_bounds())
    assert not problems, "fidelity got worse (python -m planner.fidelity --check):\n" + "\n".join(problems)


def test_the_gate_names_a_figure_that_got_worse_and_one_that_vanished():
    bounds = {"a.median": 0.05, "b.coverage": 0.8, "c.p90": 0.1}
    problems = gate.worse({"a.median": 0.06, "b.coverage": 0.7, "d.p90": 0.2}, bounds)
    assert any(p.startswith("a.median: 0.0600, above its bound 0.0500") for p in problems)
    assert any(p.startswith("b.coverage: 0.7000, below its bound 0.8000") for p in problems)
    assert any(p.startswith("c.p90") and "no longer computed" in p for p in problems)
    assert any(p.startswith("d.p90") and "no bound stored" in p for p in problems)
    assert gate.worse({"a.median": 0.0505, "b.coverage": 0.9}, {"a.median": 0.05, "b.coverage": 0.8}) == []
