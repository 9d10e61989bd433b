"""Fitting the cost model's coefficients through the simulator: the simulated latencies of the observed
workload must match the observed ones.

What is matched: per file, over the requests being fitted, the mean and the 10/25/50/75/90th percentiles of
TTFT, TPOT and E2E (bench serve's definitions), each as a relative error. Quantiles, not each request: a
simulator right on average still orders a few requests differently when two arrive within a step. A window of
Prometheus scrapes matches its histograms' instead (planner.calibration.histogram_match), whose buckets leave each
quantile open by their width: that is carried into the standard errors too (`resolution`).

The optimiser is scipy's least_squares (trust-region reflective, the fitter of `planner calibrate`,
planner.calibration.fit): a handful of bounded coefficients, a residual vector of a few dozen statistics, a
simulation per evaluation (a fraction of a second), so a few dozen to a hundred simulations fit. Its Jacobian is
finite differences of 5% of each coefficient: a simulated quantile moves in small jumps as the coefficients move
(a request changes steps), which smaller steps would read as noise. The coefficients are scaled by their
starting values, so a 5% step means the same for an efficiency and for a microsecond overhead. Gradient-free
optimisers (Nelder-Mead, differential evolution) would cost 10-100x the simulations for these few coefficients
and give no covariance; the standard errors here come from the Jacobian at the optimum and the residual spread.

Which coefficients: those of `planner calibrate`'s fit (planner.calibration.fitting: device and host terms)
whose 25% change moves some statistic by at least 1% at the start; the others cannot be pinned by these files
and keep their starting values (said so, with the largest move they made).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from planner.calibration.fit import FitResult, fit_relative, gauss_newton_covariance
from planner.calibration.fitting import BOUNDS, HOST_TERMS, device_terms
from planner.calibration.profile import EFFICIENCIES
from planner.calibration.vllm_replay import Latencies, simulated
from sim.config import Scenario
from sim.cost_coefficients import CostCoefficients
from sim.engine_facts import EngineFacts

QUANTILES = (10, 25, 50, 75, 90)
METRICS = ("ttft", "tpot", "e2e")
SCREEN_STEP = 0.25  # screening: each coefficient x 1.25 (an overhead at 0: its typical magnitude)
MIN_EFFECT = 0.01  # a coefficient whose screening step moves no statistic by 1% is not fitted
DIFF_STEP = 0.05
COVARIANCE_STEP = 0.1
MAX_EVALUATIONS = 25  # least_squares' evaluations (each Jacobian costs one simulation per coefficient more)
MIN_INDEPENDENT = 0.1  # see _independent
UNPINNED_SPREAD = 0.5
BOOTSTRAP_SAMPLES = 200
PINNED_SHARE = 0.1  # a kind of observation giving a coefficient this share of its information is named
SPEED_SEARCH = (
    np.log(1 / 20),
    np.log(200),
)  # matched_speed's range of factors  # a standard error above half the value: the data do not pin the coefficient


@dataclass(frozen=True)
class Replay:
    """One observed file as the simulator replays it; `fit_mask`: its requests the fit matches.

    What the fit asks of what it matches (a bench file here; a window of scrapes in
    planner.calibration.scrape_replay): `measured()`, the statistics and their labels; `predicted(recorder)`, the
    same of a simulation; `bootstrap(recorder, rng)`, how the fit's relative errors move over resamples;
    `resolution()`, how far the files leave each statistic open (relative)."""

    name: str
    scenario: Scenario
    facts: EngineFacts
    observed: Latencies
    fit_mask: np.ndarray

    def measured(self) -> tuple[np.ndarray, list[str]]:
        return statistics(self.observed, self.fit_mask)

    def predicted(self, recorder) -> np.ndarray:
        return statistics(simulated(recorder), self.fit_mask)[0]

    def bootstrap(self, recorder, rng) -> np.ndarray:
        """The fit's relative errors over BOOTSTRAP_SAMPLES resamples of the fitted requests (with replacement;
        the same requests observed and simulated), less those of all of them: resample x statistic."""
        chosen = np.flatnonzero(self.fit_mask)
        simulated_lat = simulated(recorder)
        errors = statistics(simulated_lat, self.fit_mask)[0] / statistics(self.observed, self.fit_mask)[0]
        rows = []
        for _ in range(BOOTSTRAP_SAMPLES):
            pick = rng.choice(chosen, size=len(chosen))
            every = np.ones(len(pick), dtype=bool)
            sim_stats = statistics(_subset(simulated_lat, pick), every)[0]
            rows.append(sim_stats / statistics(_subset(self.observed, pick), every)[0] - errors)
        return np.asarray(rows)

    def resolution(self) -> np.ndarray:
        return np.zeros(len(self.measured()[0]))  # each request's latency is in the file


def statistics(lat: Latencies, mask: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The matched statistics of the masked requests, and their labels."""
    series = {"ttft": lat.ttft_s[mask], "tpot": lat.tpot_s(mask), "e2e": lat.e2e_s[mask]}
    values, labels = [], []
    for metric in METRICS:
        data = series[metric]
        if len(data) == 0:
            continue
        values += [float(np.mean(data)), *np.percentile(data, QUANTILES).tolist()]
        labels += [f"{metric.upper()} mean", *(f"{metric.upper()} p{q}" for q in QUANTILES)]
    return np.asarray(values), labels


def simulate_replay(replay: Replay, coefficients: CostCoefficients):
    from sim.driver import simulate

    return simulate(replay.scenario, coefficients, record_steps=False, facts=replay.facts)


@dataclass(frozen=True)
class VllmFit:
    coefficients: CostCoefficients
    result: FitResult | None  # None: nothing could be fitted
    uncertainty: dict[str, float]
    pinned_by: dict[str, str]  # fitted coefficient -> the statistic it moves most, and its information by kind
    not_pinned: dict[str, str]  # coefficient -> why
    labels: list[str]
    num_simulations: int
    speed: float = 1.0  # the factor matched_speed slowed the start by


class _Counter:
    def __init__(self, replays: list[Replay]) -> None:
        self.replays, self.calls = replays, 0

    def __call__(self, coefficients: CostCoefficients) -> np.ndarray:
        self.calls += 1
        out = []
        for replay in self.replays:
            out.append(replay.predicted(simulate_replay(replay, coefficients).recorder))
        return np.concatenate(out)


def _stepped(start: CostCoefficients, name: str) -> float:
    value = getattr(start, name)
    return value * (1 + SCREEN_STEP) if value > 0 else BOUNDS[name][2]


def _independent(columns: dict[str, np.ndarray], not_pinned: dict[str, str]) -> list[str]:
    """The coefficients whose effects on the statistics are not (nearly) a mix of the others': QR with column
    pivoting of the screening Jacobian, each column scaled to length 1 (so that the choice does not depend on
    the coefficients' units), takes the most independent next; one whose part that the coefficients taken do
    not explain is below MIN_INDEPENDENT is kept at its starting value (not_pinned says so)."""
    from scipy.linalg import qr

    if not columns:
        return []
    names = list(columns)
    unit = np.column_stack([columns[n] / np.linalg.norm(columns[n]) for n in names])
    _, r, order = qr(unit, mode="economic", pivoting=True)
    own = np.abs(np.diag(r))  # the part of each (length-1) effect outside those taken before it
    keep = [names[i] for i, part in zip(order, own) if part >= MIN_INDEPENDENT]
    for i, part in zip(order, own):
        if names[i] not in keep:
            not_pinned[names[i]] = (
                f"only {part:.0%} of its effect on the statistics is not that of a mix of "
                f"{', '.join(keep)}: kept at its starting value"
            )
    return [n for n in names if n in keep]


def candidates(scenario: Scenario) -> list[str]:
    """calibrate's device and host terms and the first step after idle's wake; per_row_layer_overhead_s only on a
    CPU: it prices our CPU engine's attention looping over the requests, where vLLM's kernels take the whole batch
    at once (0 on a GPU). The wake is seen by the TTFT of requests that find the engine idle: without it the fit
    put it into every step's overhead (TPOT 11-16% pessimistic on held-out CPU runs, TTFT up to 21% optimistic,
    docs/calibration-from-vllm.md); where it moves no statistic (a GPU's long steps) screening keeps it at 0."""
    names = [*device_terms(scenario), *HOST_TERMS, "idle_wake_s"]
    return names if scenario.hardware.gpu.name == "cpu" else [n for n in names if n != "per_row_layer_overhead_s"]


def _slowed(start: CostCoefficients, names: list[str], factor: float) -> CostCoefficients:
    """Every time of `names` x factor: efficiencies / factor, overheads x factor (within their bounds)."""
    changed = {}
    for name in names:
        value = getattr(start, name)
        scaled = value / factor if name in EFFICIENCIES else value * factor
        changed[name] = float(np.clip(scaled, BOUNDS[name][0], BOUNDS[name][1]))
    return dataclasses.replace(start, **changed)


def matched_speed(
    predict, start: CostCoefficients, names: list[str], measured: np.ndarray
) -> tuple[float, CostCoefficients]:
    """The start slowed (or sped up) by the one factor that best matches the observed statistics: a starting
    point for the fit near the engine's speed however far the spec sheet is from it (a CPU, an old driver)
    (a bounded scalar search on the log factor, ~15 simulations). Factor 1 when no factor helps."""
    from scipy.optimize import minimize_scalar

    def misfit(log_factor: float) -> float:
        predicted = predict(_slowed(start, names, float(np.exp(log_factor))))
        return float(np.sum(np.log(np.maximum(predicted, 1e-12) / measured) ** 2))

    best = minimize_scalar(misfit, bounds=SPEED_SEARCH, method="bounded", options={"xatol": 0.02})
    if not best.success or best.fun >= misfit(0.0):
        return 1.0, start
    factor = float(np.exp(best.x))
    return factor, _slowed(start, names, factor)


def fit_replays(replays: list[Replay], start: CostCoefficients) -> VllmFit:
    """The coefficients (of `candidates`) that make the replays' simulated statistics the observed ones,
    starting from `start` slowed by the one factor that matches the observed speed best (matched_speed)."""
    predict = _Counter(replays)
    # a profile without them prices them 0 (None: not calibrated)
    start = dataclasses.replace(
        start, idle_wake_s=start.idle_wake_s or 0.0, per_prompt_row_overhead_s=start.per_prompt_row_overhead_s or 0.0
    )
    measured = np.concatenate([r.measured()[0] for r in replays])
    speed, start = matched_speed(predict, start, candidates(replays[0].scenario), measured)
    labels = [f"{r.name}: {label}" for r in replays for label in r.measured()[1]]
    at_start = predict(start)
    columns, not_pinned = {}, {}
    for name in candidates(replays[0].scenario):
        value = getattr(start, name)
        moved = predict(dataclasses.replace(start, **{name: _stepped(start, name)}))
        change = (moved - at_start) / np.maximum(np.abs(at_start), 1e-12)
        largest = float(np.abs(change).max())
        if largest < MIN_EFFECT:
            not_pinned[name] = (
                f"a {SCREEN_STEP:.0%} change moves no statistic by {MIN_EFFECT:.0%} (at most"
                f" {largest:.2%}): kept at {value:.4g}"
            )
        else:
            columns[name] = change / (SCREEN_STEP if value > 0 else 1.0)  # per unit of the scaled coefficient
    names = _independent(columns, not_pinned)
    if not names:
        return VllmFit(start, None, {}, {}, not_pinned, labels, predict.calls, speed)
    scale = np.array([getattr(start, n) if getattr(start, n) > 0 else BOUNDS[n][2] for n in names])
    initial = np.array([getattr(start, n) for n in names]) / scale
    lower = np.array([BOUNDS[n][0] for n in names]) / scale
    upper = np.array([BOUNDS[n][1] for n in names]) / scale

    def with_units(u: np.ndarray) -> CostCoefficients:
        return dataclasses.replace(start, **{n: float(v) for n, v in zip(names, u * scale)})

    def predict_units(u: np.ndarray) -> np.ndarray:
        return predict(with_units(u))

    unit = fit_relative(
        predict_units,
        measured,
        names,
        initial,
        lower,
        upper,
        np.ones(len(names)),
        diff_step=DIFF_STEP,
        max_nfev=MAX_EVALUATIONS,
    )
    jac = _central_jacobian(predict_units, unit.values, lower, upper, measured)
    resolution = np.concatenate([r.resolution() for r in replays])
    spread = _sampling_covariance(jac, replays, with_units(unit.values)) + _resolution_covariance(jac, resolution)
    residual = gauss_newton_covariance(jac, unit.relative_errors)
    unit_std = np.maximum(_std(residual), _std(spread))
    std = unit_std * scale
    covariance = _covariance(unit_std, residual + spread) * np.outer(scale, scale)
    # a coefficient that starts on a bound (an overhead of 0) and stays there is where it began, not a misfit
    moved = tuple(n for j, n in enumerate(names) if n in unit.at_bound and abs(unit.values[j] - initial[j]) > 1e-9)
    result = FitResult(unit.names, unit.values * scale, std, unit.relative_errors, moved, covariance)
    uncertainty = {n: float(v) for n, v in zip(names, std) if np.isfinite(v)}
    pinned_by = {n: _pinned_by(jac[:, j], labels) for j, n in enumerate(names)}
    for n, v, e in zip(names, result.values, std):
        if not np.isfinite(e) or e > UNPINNED_SPREAD * abs(v):
            not_pinned[n] = f"fitted, but its standard error ({e:.2g}) is above half its value: not pinned"
    return VllmFit(with_units(unit.values), result, uncertainty, pinned_by, not_pinned, labels, predict.calls, speed)


def _pinned_by(column: np.ndarray, labels: list[str]) -> str:
    """The statistic that moves most with a coefficient, and the observations its information comes from: each
    kind's (TTFT, QUEUE, ...) share of the squared slopes, those of PINNED_SHARE or more, largest first."""
    weight = column**2
    kinds: dict[str, float] = {}
    for label, w in zip(labels, weight):
        kind = label.split(": ", 1)[-1].split()[0]
        kinds[kind] = kinds.get(kind, 0.0) + float(w)
    total = sum(kinds.values())
    shares = sorted(((w / total, k) for k, w in kinds.items() if total > 0 and w / total >= PINNED_SHARE), reverse=True)
    said = ", ".join(f"{k} {share:.0%}" for share, k in shares)
    return f"{labels[int(np.argmax(np.abs(column)))]}" + (f" ({said})" if said else "")


def _central_jacobian(predict_units, u: np.ndarray, lower: np.ndarray, upper: np.ndarray, measured: np.ndarray):
    """d(relative error)/d(scaled coefficient) at the optimum, by central differences of COVARIANCE_STEP (one
    side at a bound): wider than the fit's steps, so the small jumps of simulated quantiles do not read as
    steep slopes (which would shrink the standard errors)."""
    jac = np.empty((len(measured), len(u)))
    for j in range(len(u)):
        step = COVARIANCE_STEP * max(abs(u[j]), 1.0)
        hi, lo = min(u[j] + step, upper[j]), max(u[j] - step, lower[j])
        up, down = u.copy(), u.copy()
        up[j], down[j] = hi, lo
        jac[:, j] = (predict_units(up) - predict_units(down)) / measured / (hi - lo)
    return jac


def _sampling_covariance(jac: np.ndarray, replays: list[Replay], fitted: CostCoefficients) -> np.ndarray:
    """The coefficients' (scaled) covariance from the requests being a sample of what the engine does: the fit's
    relative errors over BOOTSTRAP_SAMPLES resamples (seeded; each replay's `bootstrap`: for a bench file the
    same requests observed and simulated, so what moves them is how each request's observed latency departs
    from the simulator's, not which requests were sent), carried to the coefficients through the Jacobian's
    pseudo-inverse. Unlike the residuals' spread, this keeps the statistics' correlation (a few slow requests
    move every TTFT percentile at once)."""
    rng = np.random.default_rng(0)
    blocks = [replay.bootstrap(simulate_replay(replay, fitted).recorder, rng) for replay in replays]
    spread = np.linalg.pinv(jac) @ np.hstack(blocks).T  # coefficient (scaled) x resample
    return np.atleast_2d(np.cov(spread, bias=True))


def _resolution_covariance(jac: np.ndarray, resolution: np.ndarray) -> np.ndarray:
    """The coefficients' (scaled) covariance from what the files leave open (a quantile anywhere in its histogram
    bucket), each statistic's taken as independent, carried through the Jacobian's pseudo-inverse."""
    inverse = np.linalg.pinv(jac)
    return (inverse * resolution**2) @ inverse.T


def _subset(lat: Latencies, pick: np.ndarray) -> Latencies:
    return Latencies(lat.arrival_s[pick], lat.ttft_s[pick], lat.e2e_s[pick], lat.output_tokens[pick])


def _std(covariance: np.ndarray) -> np.ndarray:
    return np.sqrt(np.clip(np.diag(covariance), 0, None))


def _covariance(std: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """The covariance whose standard errors are `std` (the larger of the residuals' and the resamples' for each
    coefficient: each underestimates where the other does not) and whose correlations are those of `shape` (both
    sources together): how far coefficients that trade against each other move together."""
    inner = _std(shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        correlation = shape / np.outer(inner, inner)
    correlation = np.where(np.isfinite(correlation), np.clip(correlation, -1.0, 1.0), 0.0)
    with np.errstate(invalid="ignore"):  # an infinite std (nothing moves the coefficient) correlates with none
        covariance = np.where(correlation != 0, correlation * np.outer(std, std), 0.0)
    np.fill_diagonal(covariance, std**2)
    return covariance
