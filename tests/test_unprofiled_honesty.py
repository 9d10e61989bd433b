"""A GPU whose vendor or architecture no profile measured carries the spread the evidence shows (the development
set's AMD points; the leave-one-architecture-out folds), in its label and in what --intervals draws; a GPU of a
profiled architecture does not."""

from __future__ import annotations

import math

import pytest

from planner.calibration.provenance import STEP_TIME_SPREAD
from planner.calibration.transfer import SPREAD_PATH, load_yaml, public_cost_model
from planner.catalog import load_gpu_catalog

SPREADS = load_yaml(SPREAD_PATH)


@pytest.mark.parametrize(("name", "kind"), [("mi300x", "other_vendor"), ("mi355x", "other_vendor"),
                                            ("b200", "other_architecture"), ("gb200", "other_architecture")])  # fmt: skip
def test_an_unprofiled_vendor_or_architecture_says_so_and_is_wide(name, kind):
    _, uncertainty, label, _ = public_cost_model(load_gpu_catalog()[name], "bfloat16", 8)
    assert uncertainty[STEP_TIME_SPREAD] >= SPREADS[kind] > 0.1
    assert ("another vendor (AMD)" if kind == "other_vendor" else "an architecture without a profile") in label
    factor = math.exp(1.645 * uncertainty[STEP_TIME_SPREAD])
    assert f"x{factor:.2f} at 90%" in label


@pytest.mark.parametrize("name", ["h200", "a10", "l40", "rtx-pro-6000"])
def test_a_profiled_architecture_carries_no_such_caveat(name):
    _, uncertainty, label, _ = public_cost_model(load_gpu_catalog()[name], "bfloat16", 1)
    assert "without a profile" not in label and "another vendor" not in label
    assert uncertainty.get(STEP_TIME_SPREAD, 0.0) < SPREADS["other_architecture"]


def test_a_model_whose_attention_no_profile_measured_says_so_and_is_wide():
    from planner.calibration.resolve import resolve_cost_model
    from tests.helpers.scenarios import make_scenario

    mla = make_scenario(model="deepseek-v2-lite", hardware={"gpu": "h100-sxm"})
    _, provenance = resolve_cost_model(mla, "auto")
    assert "MLA attention: no kernel measured" in provenance.label
    assert provenance.uncertainty[STEP_TIME_SPREAD] >= SPREADS["unmeasured_attention"] > 0.1
    _, dense = resolve_cost_model(make_scenario(hardware={"gpu": "h100-sxm"}), "auto")
    assert "no kernel measured" not in dense.label
