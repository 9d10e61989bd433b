"""sim.bench's same-result rule: a speed-up may change a summary only by float rounding."""

from __future__ import annotations

import math

from sim.bench import SAME_REL, _differs


def test_floats_within_rounding_are_the_same_result():
    x = 116.01021101351276
    assert not _differs(x, x * (1 + SAME_REL / 10))
    assert _differs(x, x * (1 + SAME_REL * 10))
    assert not _differs(math.nan, math.nan)
    assert _differs(math.nan, 1.0)


def test_anything_but_a_float_must_be_equal():
    assert _differs(10000, 10001)
    assert _differs("a", "b")
    assert not _differs({"mean": 0.5, "peak": 3}, {"mean": 0.5 * (1 + 1e-15), "peak": 3})
    assert _differs({"mean": 0.5, "peak": 3}, {"mean": 0.5, "peak": 4})
    assert _differs({"mean": 0.5}, {"mean": 0.5, "peak": 4})
    assert not _differs([{"p90": 0.5}], [{"p90": 0.5 * (1 + 1e-15)}])
    assert _differs([{"p90": 0.5}], [{"p90": 0.5}, {"p99": 0.7}])
    assert _differs([True], [False])
