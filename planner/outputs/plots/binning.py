"""Columns reduced to time bins before anything is drawn.

Steps can be millions of rows: they are reduced to a few hundred time bins (time-weighted mean, min and max
per bin) with searchsorted/reduceat. Without step records, output tokens per bin are estimated from the requests.
"""

from __future__ import annotations

import numpy as np


def bin_steps(
    steps: dict, width: float, nbins: int, cols: list[str], sums: tuple[str, ...] = (), order: np.ndarray | None = None
) -> dict:
    """Reduce steps to time bins by start time. For each of `cols`: 'mean' (weighted by step duration; 0
    where the engine ran no step in the bin, i.e. was idle), 'min', 'max' (NaN where empty); for each of
    `sums`: 'sum'. Also 'edges' (nbins + 1). Steps in time order (one replica) cost a few passes over each
    column; otherwise pass `order` (an argsort of start_s) or one is computed."""
    start = np.asarray(steps["start_s"], dtype=np.float64)
    if order is None and len(start) > 1 and not bool(np.all(start[1:] >= start[:-1])):
        order = np.argsort(start, kind="stable")

    def sorted_col(name: str) -> np.ndarray:
        col = np.asarray(steps[name])
        return col if order is None else col[order]

    start = start if order is None else start[order]
    edges = np.arange(nbins + 1) * width
    first = np.searchsorted(start, edges[:-1], side="left")
    first[0] = 0  # anything before 0 (should not happen) goes to the first bin
    last = np.append(first[1:], len(start))  # anything past the end goes to the last bin
    nonempty = last > first
    bounds = first[nonempty]
    out: dict = {"edges": edges}
    if cols:
        dur = sorted_col("duration_s").astype(np.float64) if "duration_s" in steps else np.zeros(len(start))
        w = np.maximum(dur, 1e-12)  # zero-length steps still count (equally) in an otherwise empty bin
        wsum = np.add.reduceat(w, bounds) if len(bounds) else np.empty(0)
    for col in cols:
        x = sorted_col(col)
        mean = np.zeros(nbins)
        lo = np.full(nbins, np.nan)
        hi = np.full(nbins, np.nan)
        if len(bounds):
            mean[nonempty] = np.add.reduceat(x * w, bounds) / wsum
            lo[nonempty] = np.minimum.reduceat(x, bounds)
            hi[nonempty] = np.maximum.reduceat(x, bounds)
        out[col] = {"mean": mean, "min": lo, "max": hi}
    for col in sums:
        if col in steps:
            total = np.zeros(nbins)
            if len(bounds):
                total[nonempty] = np.add.reduceat(sorted_col(col).astype(np.float64), bounds)
            out[col] = {"sum": total}
    return out


def output_tokens_from_requests(requests: dict, edges: np.ndarray) -> np.ndarray:
    """Tokens emitted per bin, estimated from requests alone: the first at first_token_s, the other
    output_tokens - 1 spread evenly up to finished_s. O(n log n) via sorted cumulative sums."""
    if not all(k in requests for k in ("first_token_s", "finished_s", "output_tokens")):
        return np.zeros(len(edges) - 1)
    f = requests["first_token_s"].astype(np.float64)
    e = requests["finished_s"].astype(np.float64)
    n = requests["output_tokens"].astype(np.float64)
    ok = np.isfinite(f) & np.isfinite(e) & (n >= 1)
    f, e, n = f[ok], e[ok], n[ok]
    rest = n - 1
    span = e - f
    ramp = (span > 0) & (rest > 0)
    # point masses: the first token of every request, and the rest where there is no span to spread over
    cum = _cumulative_points(f, np.ones_like(f), edges)
    cum += _cumulative_points(e[~ramp], rest[~ramp], edges)
    # ramps: C(t) = sum_{f_i < t} r_i (t - f_i) - sum_{e_i < t} r_i (t - e_i)
    r = rest[ramp] / span[ramp]
    for points, sign in ((f[ramp], 1.0), (e[ramp], -1.0)):
        order = np.argsort(points)
        p, rr = points[order], r[order]
        cr = np.concatenate([[0.0], np.cumsum(rr)])
        crp = np.concatenate([[0.0], np.cumsum(rr * p)])
        k = np.searchsorted(p, edges, side="left")
        cum += sign * (edges * cr[k] - crp[k])
    return np.maximum(np.diff(cum), 0.0)


def _cumulative_points(t: np.ndarray, mass: np.ndarray, edges: np.ndarray) -> np.ndarray:
    order = np.argsort(t)
    c = np.concatenate([[0.0], np.cumsum(mass[order])])
    return c[np.searchsorted(t[order], edges, side="right")]
