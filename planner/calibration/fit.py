"""Bounded least squares on relative error: the one fitter behind `planner calibrate` and the shipped
profiles fitted to public operator timings.

Relative error, not absolute: a planner is judged by the percentage it is off, and a 100 us decode step
matters as much as a 2 s prefill. Bounds keep every coefficient physical (an efficiency in (0, 1], an
overhead >= 0): a fit that runs into a bound says the cost model's form is wrong, and `at_bound` reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FitResult:
    names: tuple[str, ...]
    values: np.ndarray
    std: np.ndarray  # one standard deviation, from the Jacobian at the optimum and the residual spread
    relative_errors: np.ndarray  # (predicted - measured) / measured, per row
    at_bound: tuple[str, ...]  # coefficients the optimum pressed against a bound
    # the coefficients' covariance (their units; its diagonal is std**2 where std is finite): what a prediction that
    # sums several of them is sure of, where coefficients that trade against each other make each std wide
    covariance: np.ndarray | None = None

    def as_dict(self) -> dict[str, float]:
        return {name: float(v) for name, v in zip(self.names, self.values)}

    def std_dict(self) -> dict[str, float]:
        return {name: float(s) for name, s in zip(self.names, self.std)}

    @property
    def median_abs_error(self) -> float:
        return float(np.median(np.abs(self.relative_errors)))

    @property
    def p90_abs_error(self) -> float:
        return float(np.percentile(np.abs(self.relative_errors), 90))


def fit_relative(
    predict: Callable[[np.ndarray], np.ndarray],
    measured: np.ndarray,
    names: Sequence[str],
    initial: Sequence[float],
    lower: Sequence[float],
    upper: Sequence[float],
    scale: Sequence[float] | None = None,
    loss: str = "linear",
    f_scale: float = 1.0,
    diff_step: float | None = None,
    max_nfev: int | None = None,
    mean_unbiased: bool = False,
) -> FitResult:
    """Coefficients minimising sum(((predict(c) - measured) / measured)^2) within [lower, upper].

    `predict` maps a coefficient vector (in the order of `names`) to one predicted value per measured row.
    `scale`: each coefficient's typical magnitude (efficiencies ~1, overheads ~1e-5 s), so the solver
    steps all of them alike; defaults to the initial values. `loss`, `f_scale`: scipy's robust losses
    ("soft_l1" beyond f_scale of relative error) for rows a busy machine made slow now and then. `diff_step`:
    the finite differences' relative step (scipy's default suits smooth predictions; a simulator's quantiles
    move in small jumps, which a step of a few percent averages over). `mean_unbiased`: then a second fit from that
    optimum, of sum(((predict(c) - measured) / p1)^2) with p1 the first fit's predictions, held fixed, and the
    linear loss: for rows timed one by one on a noisy machine, see below.
    """
    from scipy.optimize import least_squares  # only calibration needs scipy: keep it off the CLI's start-up

    measured = np.asarray(measured, dtype=np.float64)
    if measured.ndim != 1 or len(measured) == 0 or not np.all(np.isfinite(measured)) or np.any(measured <= 0):
        raise ValueError("measured times must be a non-empty vector of finite positive numbers")
    lo, hi = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    x0 = np.clip(np.asarray(initial, dtype=np.float64), lo, hi)
    x_scale = np.abs(np.asarray(scale if scale is not None else x0, dtype=np.float64))
    x_scale[x_scale == 0] = 1.0

    def residuals(x: np.ndarray) -> np.ndarray:
        return (np.asarray(predict(x), dtype=np.float64) - measured) / measured

    solution = least_squares(
        residuals, x0, bounds=(lo, hi), x_scale=x_scale, method="trf", loss=loss, f_scale=f_scale,
        diff_step=diff_step, max_nfev=max_nfev,
    )  # fmt: skip
    if mean_unbiased:
        # Dividing by the measured time weighs a row by 1 / measured^2: where noise only ever adds time (a step the
        # machine stalled), the optimum sits below the rows' mean, and a simulated run, which sums steps, comes out
        # short (8-25% of the fitted runs' own step time in docs/calibration-from-vllm.md's round trip). Dividing by
        # the first fit's predictions instead, held fixed, every row still counts relatively, but the fit's residuals
        # no longer favour the fast rows (one reweighting step of a gamma GLM: variance proportional to the mean^2).
        denominator = np.asarray(predict(solution.x), dtype=np.float64)
        solution = least_squares(
            lambda x: (np.asarray(predict(x), dtype=np.float64) - measured) / denominator, solution.x,
            bounds=(lo, hi), x_scale=x_scale, method="trf", diff_step=diff_step, max_nfev=max_nfev,
        )  # fmt: skip
    r = solution.fun
    cov = gauss_newton_covariance(solution.jac, r)
    std = np.sqrt(np.clip(np.diag(cov), 0, None))
    span = hi - lo
    at_bound = tuple(
        n for n, v, a, b, s in zip(names, solution.x, lo, hi, span) if np.isfinite(s) and min(v - a, b - v) < 1e-6 * s
    )
    return FitResult(tuple(names), solution.x, std, r, at_bound, cov)


def gauss_newton_covariance(jac: np.ndarray, residuals: np.ndarray) -> np.ndarray:
    """The coefficients' covariance at an optimum: pinv(J^T J) scaled by the residuals' variance; a coefficient the
    data do not constrain (a term that moves no row) gets an infinite variance rather than a made-up one."""
    dof = max(len(residuals) - jac.shape[1], 1)
    cov = np.linalg.pinv(jac.T @ jac) * (residuals @ residuals / dof)
    unmoved = np.linalg.norm(jac, axis=0) == 0
    cov[unmoved, unmoved] = np.inf
    return cov


def correlations(names: Sequence[str], covariance: np.ndarray, std: np.ndarray) -> dict[str, dict[str, float]]:
    """The profile's `correlation` block of a covariance: name -> later name -> correlation, for the pairs whose
    both stds are finite and positive and whose correlation is not 0 (rounded to 6 decimals: a profile is text)."""
    out: dict[str, dict[str, float]] = {}
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            scale = std[i] * std[j]
            if not (np.isfinite(scale) and scale > 0):
                continue
            r = round(float(np.clip(covariance[i, j] / scale, -1.0, 1.0)), 6)
            if r != 0:
                out.setdefault(a, {})[names[j]] = r
    return out
