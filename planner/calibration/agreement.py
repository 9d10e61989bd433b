"""Whether two profiles of one engine agree, judged by what they predict: the mean time of a run's steps of each kind,
priced by each profile, with each profile's covariance carried through (`predicted_time`).

Coefficient by coefficient is the wrong test where the cost model's terms trade against each other: on a model of
two layers a per-step and a per-layer overhead add up to nearly the same step, so two fits may split one fixed cost
differently and both be right about every step. Their stds are then wide, or, where one fit kept one of the two
fixed, narrow and beside the point. A step's predicted time is what a profile is used for, and its uncertainty is
known once the fit's correlations are (profile.py's `correlation`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from planner.calibration.fitting import BOUNDS, HOST_TERMS, device_terms, measured_scenario, predict_rows, step_classes
from planner.calibration.profile import Profile, covariance
from planner.calibration.wake import from_waking_arrival, woken_steps
from sim.config import Scenario
from sim.cost_coefficients import CostCoefficients
from sim.engine_facts import EngineFacts

AGREE_WITHIN = 2.0  # combined standard errors: two right fits land this close about 95% of the time
GRADIENT_STEP = 1e-3  # relative: the price is smooth in every coefficient (a roofline's corner aside)


@dataclass(frozen=True)
class Priced:
    seconds: float  # the mean predicted seconds of the steps
    std: float  # its standard error from the profile's covariance
    unpriced: tuple[str, ...]  # coefficients the steps' price moves with that the profile gives no std


def step_kinds(
    runs: list[dict[str, np.ndarray]], arrivals: list[np.ndarray | None]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Several runs' steps as one table (`measured_s`: each step's seconds, those after idle from their waking arrival
    where the run's arrivals are given, as the wake is priced: wake.py), and the kinds compared: decode steps and
    steps with prompt tokens (each not after idle), and the first steps after idle (which pay idle_wake_s), each told
    within its own run (a run's start times begin at its start); kinds with no step are left out."""
    names = set.intersection(*(set(rows) for rows in runs))
    rows = {n: np.concatenate([r[n] for r in runs]) for n in names}
    rows["measured_s"] = np.concatenate([from_waking_arrival(r, a) for r, a in zip(runs, arrivals)])
    woken = np.concatenate([woken_steps(r) for r in runs])
    decode = step_classes(rows) == "decode"
    kinds = {"decode steps": decode & ~woken, "steps with prompt tokens": ~decode & ~woken, "steps after idle": woken}
    return rows, {kind: mask for kind, mask in kinds.items() if mask.any()}


def predicted_time(profile: Profile, scenario: Scenario, rows: dict[str, np.ndarray], woken: bool) -> Priced:
    """The mean seconds of `rows` as the serial engine that measured them runs them, priced by the profile (plus its
    idle_wake_s for steps after idle), and that mean's std: the gradient over the calibrated terms (central
    differences) through the profile's covariance. A term without a std counts as exact, and is named."""
    coefficients = profile.cost_coefficients()
    facts = EngineFacts.of(measured_scenario(scenario))

    def price(c: CostCoefficients) -> float:
        return float(np.mean(predict_rows(facts, c, rows, serial=True))) + ((c.idle_wake_s or 0.0) if woken else 0.0)

    names = [*device_terms(scenario), *HOST_TERMS, "idle_wake_s"]
    gradient = np.zeros(len(names))
    for i, name in enumerate(names):
        value = getattr(coefficients, name) or 0.0
        up, down = value + GRADIENT_STEP * max(abs(value), BOUNDS[name][2]), max(value * (1 - GRADIENT_STEP), 0.0)
        gradient[i] = (price(_with(coefficients, name, up)) - price(_with(coefficients, name, down))) / (up - down)
    unpriced = tuple(n for n, g in zip(names, gradient) if g != 0 and not profile.uncertainty.get(n, 0.0) > 0)
    variance = float(gradient @ covariance(profile, names) @ gradient)
    return Priced(price(coefficients), float(np.sqrt(max(variance, 0.0))), unpriced)


def _with(coefficients: CostCoefficients, name: str, value: float) -> CostCoefficients:
    return dataclasses.replace(coefficients, **{name: value})


def agreement_lines(
    first: tuple[str, Profile],
    second: tuple[str, Profile],
    scenario: Scenario,
    runs: list[dict[str, np.ndarray]],
    arrivals: list[np.ndarray | None],
    what: str,
) -> tuple[list[str], bool]:
    """A line per kind of step of the runs (each a steps.csv's columns, with its requests' arrivals or None): its
    measured mean, each profile's predicted mean +- std, and how many combined stds apart they are; and whether
    every kind is within AGREE_WITHIN."""
    (name_a, a), (name_b, b) = first, second
    lines = [
        f"Predicted step times of {what} (mean ms per step, +- one std through each profile's covariance):",
        f"  {'steps':<31}{'measured':>10}{name_a:>20}{name_b:>20}  |difference| / combined std",
    ]
    agree = True
    rows, kinds = step_kinds(runs, arrivals)
    for kind, mask in kinds.items():
        chosen = {k: v[mask] for k, v in rows.items()}
        woken = kind == "steps after idle"
        pa, pb = (predicted_time(p, scenario, chosen, woken) for p in (a, b))
        combined = float(np.hypot(pa.std, pb.std))
        apart = abs(pa.seconds - pb.seconds) / combined if combined > 0 else np.inf
        agree &= apart <= AGREE_WITHIN
        measured = 1e3 * float(np.mean(chosen["measured_s"]))
        cells = [f"{1e3 * p.seconds:.4g} +- {1e3 * p.std:.2g}" for p in (pa, pb)]
        lines.append(f"  {f'{kind} ({int(mask.sum())})':<31}{measured:>10.4g}{cells[0]:>20}{cells[1]:>20}  {apart:.1f}")
        for label, p in ((name_a, pa), (name_b, pb)):
            if p.unpriced:
                lines.append(f"    {label}: no std for {', '.join(p.unpriced)} (kept, not fitted): taken as exact")
    verdict = "agree" if agree else "DO NOT agree"
    lines.append(f"  the two profiles {verdict} within {AGREE_WITHIN:g} combined standard errors on every kind of step")
    return lines, agree
