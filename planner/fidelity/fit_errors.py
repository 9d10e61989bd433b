"""How far a set of coefficients is from Vidur's measured rows: the median and p90 of relative errors, and the
per-layer and per-step errors every section quotes."""

from __future__ import annotations

import numpy as np


def errors(e: np.ndarray) -> tuple[float, float]:
    a = np.abs(np.asarray(e))
    return float(np.median(a)), float(np.percentile(a, 90))


def link_bytes_per_s(gpu: str) -> float:
    from planner.calibration.public_data import gpu_spec

    return (gpu_spec(gpu).interconnect_bandwidth_gbps or 0) * 1e9


def default_coefficients() -> dict[str, float]:
    from sim.cost_coefficients import CostCoefficients

    return CostCoefficients().to_dict()


def step_errors(rows, ar, gpu, tp, coefficients, form=None) -> tuple[np.ndarray, np.ndarray]:
    """(per-layer, per-step) relative errors of `coefficients` on `rows` (one GPU, one tp)."""
    from planner.calibration import public_fit as pf
    from planner.calibration.public_fit import all_reduce_rows, step_times_s

    b = pf.batch(rows)
    layer = pf.predicted_layer_s(b, coefficients, form)
    ar_rows = all_reduce_rows(gpu, tp, ar) if tp > 1 else []
    measured, predicted = step_times_s(b, coefficients, link_bytes_per_s(gpu), ar_rows, form)
    return layer / b.layer_s - 1, predicted / measured - 1
