"""The one place a candidate's cost-model coefficients come from, with what they rest on.

Every simulation of a sizing search takes its coefficients from `resolve_coefficients`, and every figure
carries the provenance label it returns: `spec-sheet` (the defaults of `sim.cost_coefficients.CostCoefficients`),
`calibrated (...)` or `transferred (...)` — the same resolution as `planner simulate` (the scenario's
`calibration` key: `auto` uses the user's profiles, else the shipped public calibrations).
"""

from __future__ import annotations

from planner.calibration.provenance import Provenance
from planner.calibration.resolve import resolve_cost_model
from sim.config import Scenario
from sim.cost_coefficients import CostCoefficients


def resolve_coefficients(scenario: Scenario) -> tuple[CostCoefficients, Provenance]:
    """(coefficients, provenance: its kind, label and the std per coefficient it knows) for this scenario's
    GPU, model, dtype and tensor parallel size."""
    return resolve_cost_model(scenario)
