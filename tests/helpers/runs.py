"""Two simulations of one scenario compared: the same steps and summary (floats to a relative 1e-9, the order
of float sums being the only freedom the simulator's fast paths have)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.metrics import summarize


def assert_same_run(fast, slow, scenario) -> None:
    fast_summary, slow_summary = summarize(fast.recorder, scenario.slo), summarize(slow.recorder, scenario.slo)
    assert fast.recorder.num_steps == slow.recorder.num_steps
    for key, value in fast_summary.items():
        if isinstance(value, float):
            assert value == pytest.approx(slow_summary[key], rel=1e-9, nan_ok=True), key
    fast_steps, slow_steps = fast.recorder.steps.view(), slow.recorder.steps.view()
    fast_order = np.lexsort((fast_steps["start_s"], fast_steps["replica"]))
    slow_order = np.lexsort((slow_steps["start_s"], slow_steps["replica"]))
    for column in fast_steps:
        a, b = fast_steps[column][fast_order], slow_steps[column][slow_order]
        if column in ("start_s", "duration_s"):
            np.testing.assert_allclose(a, b, rtol=1e-9, err_msg=column)
        else:
            np.testing.assert_array_equal(a, b, err_msg=column)
