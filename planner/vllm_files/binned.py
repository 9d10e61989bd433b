"""What a Prometheus histogram says, and what it cannot: its quantiles interpolated within buckets (as
Prometheus's own `histogram_quantile` does), how far the bucket leaves each one open, and values drawn from its
buckets (the lengths of a window's requests).

A quantile is found in the bucket where the cumulative count reaches its rank and placed linearly between the
bucket's bounds (the first bucket starts at 0); one in the `+Inf` bucket has no upper bound and is None. The
bucket's width is the quantile's resolution: any value in it gives the same counts, so a quantile is known to
about width / sqrt(12) (the spread of a uniform over the bucket).
"""

from __future__ import annotations

import math

import numpy as np


def per_bucket(cumulative: np.ndarray, count: float) -> np.ndarray:
    """Observations in each bucket, the +Inf bucket last."""
    return np.diff(np.concatenate([[0.0], np.asarray(cumulative, dtype=np.float64), [count]]))


def quantile(bounds: tuple[float, ...], cumulative: np.ndarray, count: float, q: float) -> tuple[float, float] | None:
    """The q-quantile (0 < q < 1) interpolated in its bucket, and its bucket's width; None: in the +Inf bucket
    or no observation."""
    if count <= 0:
        return None
    rank = q * count
    b = int(np.searchsorted(cumulative, rank, side="left"))
    if b >= len(bounds):
        return None
    lower = bounds[b - 1] if b > 0 else 0.0
    below = cumulative[b - 1] if b > 0 else 0.0
    inside = cumulative[b] - below
    share = (rank - below) / inside if inside > 0 else 1.0
    return lower + (bounds[b] - lower) * share, bounds[b] - lower


def cumulative_at(values: np.ndarray, bounds: tuple[float, ...]) -> np.ndarray:
    """Observations at or below each bound (Prometheus's `le`), of values observed one by one."""
    return np.searchsorted(np.sort(values), np.asarray(bounds, dtype=np.float64), side="right").astype(np.float64)


def draw_integers(
    bounds: tuple[float, ...], cumulative: np.ndarray, count: float, total: float, top: int, rng
) -> np.ndarray:
    """`count` whole numbers, as many in each bucket (lower, upper] as the histogram holds (in random order; the
    +Inf bucket ends at `top`). Within its bucket each is placed by the histogram's CDF interpolated monotonically
    (PCHIP) in log values, the shape the neighbouring buckets suggest; then every position within its bucket is
    raised to one power, found by bisection, so that the values' sum is the histogram's `total` (its `_sum`)."""
    from scipy.interpolate import PchipInterpolator

    counts = np.rint(per_bucket(cumulative, count)).astype(np.int64)
    lower = np.concatenate([[0.0], bounds])
    upper = np.maximum(np.concatenate([bounds, [float(top)]]), lower + 1)
    below = np.concatenate([[0.0], np.cumsum(counts) / max(counts.sum(), 1)])  # the CDF at each bucket's lower end
    at = np.concatenate([[0.5], upper])  # where: the first bucket's values are >= 1
    rising = np.concatenate([[True], np.diff(below) > 0])
    inverse = PchipInterpolator(below[rising], np.log(at[rising]))
    which = rng.permutation(np.repeat(np.arange(len(counts)), counts))
    u = below[which] + (below[which + 1] - below[which]) * rng.random(len(which))
    width = upper[which] - lower[which]
    position = np.clip((np.exp(inverse(u)) - lower[which]) / width, 1e-9, 1.0)

    def values(power: float) -> np.ndarray:
        return np.clip(np.ceil(lower[which] + width * position**power), lower[which] + 1, upper[which])

    low, high = -6.0, 6.0  # log2 of the power: the sum falls as the power rises
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if values(2.0**middle).sum() > total else (low, middle)
    return values(2.0 ** ((low + high) / 2)).astype(np.int64)


def resolution(value: float, width: float) -> float:
    """The relative uncertainty a bucket of `width` leaves a quantile of `value` at (width / sqrt(12))."""
    return width / math.sqrt(12) / value if value > 0 else math.inf
