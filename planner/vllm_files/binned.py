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
    """`count` whole numbers, as many in each bucket as the histogram holds (in random order), each placed in
    its bucket (lower, upper] at lower + width * u^a, u uniform: one shape `a` for every bucket, chosen so that
    the values' expected sum is the histogram's `total` (`_sum`): the buckets say how many, the sum says where
    in them. The +Inf bucket ends at `top`."""
    counts = np.rint(per_bucket(cumulative, count)).astype(np.int64)
    lower = np.concatenate([[0.0], bounds])
    upper = np.maximum(np.concatenate([bounds, [float(top)]]), lower + 1)
    which = rng.permutation(np.repeat(np.arange(len(counts)), counts))
    width = upper - lower
    spare = float(np.sum(counts * width))
    share = (total - float(np.sum(counts * lower))) / spare if spare > 0 else 0.5
    share = min(max(share, 0.02), 0.98)  # the mean of u^a is 1 / (a + 1)
    u = rng.random(len(which)) ** (1 / share - 1)
    values = np.ceil(lower[which] + width[which] * u)
    return np.clip(values, lower[which] + 1, upper[which]).astype(np.int64)


def resolution(value: float, width: float) -> float:
    """The relative uncertainty a bucket of `width` leaves a quantile of `value` at (width / sqrt(12))."""
    return width / math.sqrt(12) / value if value > 0 else math.inf
