"""The shipped profiles' transfer to GPUs nobody profiled (planner/calibration/transfer.py): which coefficients and
spreads a GPU gets, the leave-one-GPU-out folds they come from, and what is not calibrated by an fp16 profile."""

from __future__ import annotations

import dataclasses
import math

import pytest

from planner.calibration.provenance import STEP_TIME_SPREAD
from planner.calibration.public_profiles import shipped_profiles
from planner.calibration.shipped import NO_HOST_LAUNCH, PROFILED_GPUS
from planner.calibration.transfer import FOLDS_PATH, load_table, load_yaml, public_cost_model, relative_std
from planner.catalog import load_gpu_catalog
from sim.cost_coefficients import CostCoefficients

COEFFICIENT_NAMES = {f.name for f in dataclasses.fields(CostCoefficients)}


def test_transfer_uncertainty_is_the_spread_of_the_leave_one_gpu_out_folds():
    folds = load_yaml(FOLDS_PATH)["folds"]
    assert {f["held_out"] for f in folds} == set(PROFILED_GPUS)
    assert relative_std(folds) == load_table()["relative_std"]


@pytest.mark.parametrize("name", ["a10", "l4", "l40s", "l40", "h200", "mi300x", "h100-pcie", "b200", "mi355x"])
def test_unprofiled_gpu_is_transferred_with_a_measured_uncertainty(name):
    ids = {p["id"] for p in shipped_profiles()}
    for tp in (1, 2):
        coefficients, uncertainty, label, _ = public_cost_model(load_gpu_catalog()[name], "bfloat16", tp)
        assert label.startswith("transferred (from public profiles ")
        sources = label[len("transferred (from public profiles ") : label.index(")")].split(", ")
        assert {source.split()[-1] for source in sources} <= ids  # "<gpu> <id>" each
        # every fitted coefficient's transfer spread, and the sources' step-time residual
        assert set(uncertainty) == set(coefficients) - set(NO_HOST_LAUNCH) | {STEP_TIME_SPREAD}
        assert set(coefficients) <= COEFFICIENT_NAMES
        assert all(math.isfinite(s) and s > 0 for s in uncertainty.values())
        if tp > 1:
            assert "interconnect_efficiency" in coefficients


def test_a_leave_one_gpu_out_fold_never_sees_the_held_out_gpus_all_reduces():
    # The A40 has no all-reduce data: its interconnect terms come from GPUs that have, but in the fold that holds
    # out the A100 not from any subset containing the A100 (they once did, and halved the spread it measured).
    from planner.calibration.transfer import fill_interconnect

    joint = load_table()["joint"]
    fold = fill_interconnect(joint, ("a40",), 2, held_out="a100-80gb")
    assert fold["interconnect_efficiency"] == joint["h100-sxm"][2]["interconnect_efficiency"]
    in_use = fill_interconnect(joint, ("a40",), 2)  # outside the folds: every GPU with all-reduce data
    assert in_use["interconnect_efficiency"] == joint["a100-80gb+a40+h100-sxm"][2]["interconnect_efficiency"]


def test_a_transferred_gpu_is_not_known_better_than_the_gpus_it_comes_from():
    catalog = load_gpu_catalog()
    _, own, _, _ = public_cost_model(catalog["a100-80gb"], "bfloat16", 1)
    _, transferred, label, _ = public_cost_model(catalog["a100-40gb"], "bfloat16", 1)
    assert label.startswith("transferred") and transferred[STEP_TIME_SPREAD] >= own[STEP_TIME_SPREAD] > 0


def test_the_a40s_own_profile_prices_all_reduces_from_the_gpus_measured_with_one():
    # Vidur measured no all-reduce on the A40: at tp 2 it once kept the spec-sheet defaults, labelled calibrated,
    # with no spread, while an L40S transferred from the same A40 got fitted terms and a spread.
    c, u, label, _ = public_cost_model(load_gpu_catalog()["a40"], "bfloat16", 2)
    assert label.startswith("calibrated (public profile ") and "all-reduce transferred" in label
    assert c["interconnect_efficiency"] != CostCoefficients().interconnect_efficiency
    assert u["interconnect_efficiency"] > 0.1 * c["interconnect_efficiency"]


def test_quantised_weights_are_not_calibrated_by_an_fp16_profile():
    gpu = load_gpu_catalog()["a100-80gb"]
    _, plain, label, _ = public_cost_model(gpu, "bfloat16", 1)
    _, quantised, quantised_label, _ = public_cost_model(gpu, "bfloat16", 1, quantized=True)
    assert label.startswith("calibrated") and quantised_label.startswith("transferred")
    assert quantised["flops_efficiency"] > plain["flops_efficiency"]  # the widest spread, not the fit's 1%


def test_the_a40s_all_reduces_are_transferred_on_every_path_of_its_own_profile():
    # Quantised weights, float32 and tp above 8 take its own profile as "transferred": the all-reduce terms must not
    # fall back to spec-sheet defaults there either.
    a40 = load_gpu_catalog()["a40"]
    for dtype, tp, quantized in (("bfloat16", 2, True), ("float32", 4, False), ("bfloat16", 16, False)):
        c, u, label, _ = public_cost_model(a40, dtype, tp, quantized)
        assert (
            label.startswith("transferred")
            and c["interconnect_efficiency"] != CostCoefficients().interconnect_efficiency
        )
        assert u["interconnect_efficiency"] > 0
