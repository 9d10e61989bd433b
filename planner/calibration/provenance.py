"""Where a simulation's cost model came from (`Provenance`), and the step-time spread its uncertainty may
carry beside the coefficients' stds (`residual_spread`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Provenance:
    """Where a simulation's cost model came from, shown in every summary, printout and plot."""

    kind: str  # spec-sheet | calibrated | transferred
    label: str  # the printable string
    profile_id: str | None = None
    uncertainty: dict[str, float] = field(default_factory=dict)  # coefficient -> std (empty: none known)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


SPEC_SHEET = Provenance("spec-sheet", "spec-sheet")
# A Provenance's uncertainty may also hold this key: the relative std of the step time that the fitted
# coefficients leave unexplained (the fit's residual spread, 1.4826 x its median |relative error|: a robust
# std). `--intervals` draws it as one factor on every step of a run (planner/calibration/intervals.py).
STEP_TIME_SPREAD = "step_time_rel"


def residual_spread(fit: dict | None) -> dict[str, float]:
    """{STEP_TIME_SPREAD: std} from a profile's fit section, or {} when it has no median error."""
    median = (fit or {}).get("median_abs_error")
    return {STEP_TIME_SPREAD: 1.4826 * float(median)} if isinstance(median, int | float) and median > 0 else {}
