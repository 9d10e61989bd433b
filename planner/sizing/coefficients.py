"""The one place a candidate's cost-model coefficients come from, with what they rest on.

Every simulation of a sizing search takes its coefficients from `resolve_coefficients`, and every figure
carries the provenance label it returns: `spec-sheet` (the defaults of `sim.cost_model.CostCoefficients`),
`calibrated (...)` or `transferred (...)`. Today only the spec-sheet defaults exist; the calibration
resolver (fitted profiles per GPU) plugs in here and nowhere else.
"""

from __future__ import annotations

from sim.config import Scenario
from sim.cost_model import CostCoefficients

SPEC_SHEET = "spec-sheet"


def resolve_coefficients(scenario: Scenario) -> tuple[CostCoefficients, str]:
    """(coefficients, provenance) for this scenario's GPU, model and tensor parallel size."""
    return CostCoefficients(), SPEC_SHEET
