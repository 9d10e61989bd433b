import numpy as np
import pytest

from planner.calibration.fit import fit_relative


def _roofline(x, tokens):
    eff, overhead_s = x
    return np.maximum(tokens * 2e9 / (1e12 * eff), 1e9 / (1e12 * 0.8)) + overhead_s


def test_recovers_known_coefficients_from_noisy_rows():
    rng = np.random.default_rng(0)
    tokens = np.geomspace(1, 4096, 60)
    truth = np.array([0.55, 3e-4])
    measured = _roofline(truth, tokens) * (1 + 0.01 * rng.standard_normal(len(tokens)))
    fit = fit_relative(lambda x: _roofline(x, tokens), measured, ["eff", "overhead_s"], [0.9, 1e-3], [0.01, 0], [1, 1])
    assert fit.as_dict()["eff"] == pytest.approx(0.55, rel=0.02)
    assert fit.as_dict()["overhead_s"] == pytest.approx(3e-4, rel=0.1)
    assert fit.median_abs_error < 0.02
    assert np.all(np.isfinite(fit.std)) and np.all(fit.std > 0)
    assert fit.at_bound == ()


def test_reports_a_coefficient_pressed_against_its_bound():
    tokens = np.geomspace(1, 4096, 30)
    measured = _roofline(np.array([0.5, 0.0]), tokens) * 0.5  # faster than any overhead >= 0 can explain
    fit = fit_relative(lambda x: _roofline(x, tokens), measured, ["eff", "overhead_s"], [0.5, 1e-4], [0.01, 0], [1, 1])
    assert "overhead_s" in fit.at_bound or "eff" in fit.at_bound


def test_refuses_non_positive_measurements():
    with pytest.raises(ValueError, match="positive"):
        fit_relative(lambda x: x, np.array([1.0, 0.0]), ["a"], [1.0], [0.0], [2.0])


def test_a_mean_unbiased_fit_predicts_noisy_rows_total_time_and_a_relative_one_does_not():
    # Steps timed one by one on a noisy machine: most at their price, some stalled (noise that only adds time).
    # Relative error weighs each row by 1 / measured^2, so the fit prices below the rows' mean, and a simulated run
    # (a sum of steps) comes out short; the refit divides by the first fit's predictions and does not.
    rng = np.random.default_rng(1)
    tokens = np.tile(np.geomspace(1, 4096, 40), 25)
    stall = np.where(rng.random(len(tokens)) < 0.2, rng.exponential(0.5, len(tokens)), 0.0)
    measured = _roofline(np.array([0.55, 3e-4]), tokens) * (1 + 0.03 * rng.standard_normal(len(tokens)) + stall)
    args = (lambda x: _roofline(x, tokens), measured, ["eff", "overhead_s"], [0.9, 1e-3], [0.01, 0], [1, 1])
    relative, unbiased = fit_relative(*args), fit_relative(*args, mean_unbiased=True)
    total_s = measured.sum()
    assert _roofline(relative.values, tokens).sum() < 0.95 * total_s
    assert _roofline(unbiased.values, tokens).sum() == pytest.approx(total_s, rel=0.02)
