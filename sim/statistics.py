"""Statistics of a run computed exactly, or within a stated error in bounded memory, at numpy's speed: the
exact sum of floats, numpy's percentile without its numpy.ma import, and the histogram of inter-token gaps."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


def exact_sum(values: np.ndarray) -> float:
    """math.fsum of finite float64 values (their exact sum, correctly rounded) at numpy's speed: each value is
    a 53-bit integer times a power of two; the integers, split in 27- and 26-bit halves so that no sum of fewer
    than 2^26 of them rounds, are added per power of two in float64, and Python's integers add the rest."""
    if len(values) >= 1 << 26:
        raise ValueError(f"exact_sum of {len(values)} values: at most 2^26 - 1 at once")
    mantissa, exponent = np.frexp(values)
    mantissa = (mantissa * 2.0**53).astype(np.int64)  # exact: value = mantissa * 2^(exponent - 53)
    lowest = int(exponent.min()) if len(values) else 0
    exponent -= lowest
    high = np.bincount(exponent, weights=mantissa >> 26)
    low = np.bincount(exponent, weights=mantissa & ((1 << 26) - 1))
    total = sum(((int(h) << 26) + int(l)) << k for k, (h, l) in enumerate(zip(high.tolist(), low.tolist())))
    scale = lowest - 53
    return float(total << scale) if scale >= 0 else total / (1 << -scale)  # int / int rounds correctly


class GapHistogram:
    """Inter-token gaps in seconds, in log buckets of width RATIO (HDR-histogram style), 150 kB in all.

    Bucket i holds gaps in [MIN_S * RATIO^i, MIN_S * RATIO^(i+1)) and stands for their geometric middle, so
    every gap it holds is within sqrt(RATIO) - 1 < RELATIVE_ERROR of that value. Percentiles follow
    numpy.percentile's linear rule between the order statistics they read from the buckets, hence also within
    RELATIVE_ERROR; they are clamped to the exact min and max. Gaps below MIN_S (none in practice) go to
    bucket 0 and above MAX_S to the last, both still counted in the exact mean. Gaps are buffered and binned
    in numpy batches: a step's gaps cost a list extend, a decode window's an array kept as it is.
    """

    RELATIVE_ERROR = 1e-3
    RATIO = 1.002  # sqrt(1.002) - 1 = 0.09995%
    MIN_S, MAX_S = 1e-9, 1e7
    NUM_BUCKETS = int(np.ceil(np.log(MAX_S / MIN_S) / np.log(RATIO)))
    FLUSH = 1 << 16

    def __init__(self) -> None:
        self.counts = np.zeros(self.NUM_BUCKETS, dtype=np.int64)
        self.count = 0
        self.sum_s = 0.0
        self.min_s = float("inf")
        self.max_s = float("-inf")
        # Gaps not binned yet: those counted once, those counted a number of times (a step's: a few distinct
        # gaps, each of many requests) as lists (extending them is a copy of pointers, where an array converts
        # each value), and arrays of gaps each counted `times` times (a decode window's: one number for the
        # array, or one per gap); a batch is binned as a whole, so the order within it does not matter (fsum is
        # exact).
        self._once: list[float] = []
        self._counted: list[float] = []
        self._counts: list[int] = []
        self._tiled: list[np.ndarray] = []  # arrays whose every gap counts _tiled_times[i] times
        self._tiled_times: list[int] = []
        self._weighted: list[tuple[np.ndarray, np.ndarray]] = []  # (gaps, each gap's times)
        self._num_pending = 0

    def add(self, gap_s: float) -> None:
        self.add_many([gap_s])

    def add_many(self, gaps_s: np.ndarray | list[float], times: int | np.ndarray = 1) -> None:
        """Each of gaps_s, `times` times over, or times[i] times for gaps_s[i] (a decode window: each step's gap
        once per request in the step). A list of floats is taken as it is: no array is built for a step's few
        gaps; an array is kept, not copied."""
        if isinstance(gaps_s, list) and times == 1:
            self._once.extend(gaps_s)
        elif isinstance(times, np.ndarray):
            self._weighted.append((np.asarray(gaps_s, dtype=np.float64), times))
        else:
            self._tiled.append(np.asarray(gaps_s, dtype=np.float64))
            self._tiled_times.append(times)
        self._num_pending += len(gaps_s)
        if self._num_pending >= self.FLUSH:
            self._flush()

    def add_counted(self, gaps_s: list[float], counts: list[int]) -> None:
        """Each of gaps_s, counts[i] times over."""
        self._counted += gaps_s
        self._counts += counts
        self._num_pending += len(gaps_s)
        if self._num_pending >= self.FLUSH:
            self._flush()

    def _pending(self) -> tuple[np.ndarray, np.ndarray]:
        """The gaps not binned yet, and how many times each counts."""
        once = np.array(self._once, dtype=np.float64)
        tiled_lengths = [len(gaps) for gaps in self._tiled]
        values = np.concatenate(
            [once, np.array(self._counted, dtype=np.float64), *self._tiled, *(gaps for gaps, _ in self._weighted)]
        )
        times = np.concatenate(
            [
                np.ones(len(once)),
                np.array(self._counts, dtype=np.float64),
                np.array(self._tiled_times, dtype=np.float64).repeat(tiled_lengths),
                *(t for _, t in self._weighted),
            ]
        )
        return values, times

    def _flush(self) -> None:
        if not self._num_pending:
            return
        values, times = self._pending()
        # Counts are whole numbers far below 2^53: the float weights add them exactly.
        self.counts += np.bincount(self._bucket(values), weights=times, minlength=self.NUM_BUCKETS).astype(np.int64)
        self.count += int(times.sum())
        # Not `values @ times`: BLAS's dot product rounds by its CPU kernel and thread count (the same run gave
        # another mean on another machine), and OpenBLAS's worker thread then spins on the other core for tens
        # of milliseconds. The exact sum of the products, rounded once, is the same everywhere.
        self.sum_s += exact_sum(values * times)
        self.min_s = min(self.min_s, float(values.min()))
        self.max_s = max(self.max_s, float(values.max()))
        self._once, self._counted, self._counts, self._num_pending = [], [], [], 0
        self._tiled, self._tiled_times, self._weighted = [], [], []

    def _bucket(self, gaps_s: np.ndarray) -> np.ndarray:
        index = np.log(np.maximum(gaps_s, self.MIN_S) / self.MIN_S) / np.log(self.RATIO)
        return np.minimum(index.astype(np.int64), self.NUM_BUCKETS - 1)  # a gap of 0 lands in bucket 0

    def __len__(self) -> int:
        self._flush()
        return self.count

    def mean_s(self) -> float:
        self._flush()
        return self.sum_s / self.count if self.count else float("nan")

    def percentiles_s(self, percents: np.ndarray | list[float]) -> np.ndarray:
        """numpy.percentile's (linear) percentiles of every gap, each within RELATIVE_ERROR."""
        self._flush()
        percents = np.asarray(percents, dtype=np.float64)
        if not self.count:
            return np.full(percents.shape, np.nan)
        rank = percents / 100 * (self.count - 1)
        lo, hi = np.floor(rank), np.ceil(rank)
        value_lo, value_hi = self._order_statistic(lo), self._order_statistic(hi)
        return value_lo + (rank - lo) * (value_hi - value_lo)

    def _order_statistic(self, k: np.ndarray) -> np.ndarray:
        """The k-th smallest gap (0-based), as its bucket's middle, clamped to the exact range."""
        bucket = np.searchsorted(np.cumsum(self.counts), k.astype(np.int64), side="right")
        middle = self.MIN_S * self.RATIO ** (bucket + 0.5)
        return np.clip(middle, self.min_s, self.max_s)

    def sample_ms(self, size: int) -> np.ndarray:
        """`size` gaps in ms at evenly spaced ranks: the distribution's shape, for a CDF plot."""
        if len(self) == 0:
            return np.empty(0)
        ranks = np.linspace(0, self.count - 1, min(size, self.count))
        return self._order_statistic(np.round(ranks)) * 1e3


def percentile(values: np.ndarray, percent: float) -> float:
    """numpy.percentile(values, percent) (its default, linear method) to the last bit, without the np.unique
    that numpy's own calls, which imports numpy.ma: 25 ms of every run's start-up. The same operations as
    numpy's _quantile and _lerp, for one float percent of a 1-d array."""
    values = np.asarray(values, dtype=np.float64)
    last = len(values) - 1
    virtual = last * (percent / 100)
    if np.isnan(values).any():
        return math.nan  # numpy's: a NaN sorts last and makes every quantile NaN
    if virtual >= last:
        low = high = last
        gamma = virtual + 1  # numpy's index -1 for the last value
    elif virtual < 0:
        low = high = 0
        gamma = virtual
    else:
        low = math.floor(virtual)
        high = low + 1
        gamma = virtual - low
    # numpy's partition points (the ends, to find NaNs, and both neighbours): with the same points the same
    # element lands at each, down to the sign of a zero among equal ones
    below, above = np.partition(values, sorted({0, last, low, high}))[[low, high]].tolist()
    difference = above - below
    return above - difference * (1 - gamma) if gamma >= 0.5 else below + difference * gamma


class Totals(NamedTuple):
    """A run's integrals over its steps' durations, and the most blocks used."""

    busy_s: float
    block_seconds: float  # blocks used x seconds
    slot_seconds: float  # tokens held / slots in the blocks handed out x seconds
    peak_blocks: int


class BusyTotals:
    """Adds up a run's `Totals`. A step adds its floats at once; a decode window's arrays are kept and summed
    WINDOW_BATCH windows at a time (a window's few elements cost less than numpy's calls on them). Float sums in
    another order differ in their last bits: stepping one by one gives the same totals within a relative 1e-12
    or so."""

    WINDOW_BATCH = 1024

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._busy_s = self._block_seconds = self._slot_seconds = 0.0
        self._peak_blocks = 0
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # windows' (durations, blocks, held)

    def add_step(self, duration_s: float, kv_blocks_used: int, tokens_held: int) -> None:
        self._busy_s += duration_s
        self._block_seconds += kv_blocks_used * duration_s
        if kv_blocks_used:
            self._slot_seconds += tokens_held / (kv_blocks_used * self.block_size) * duration_s
        self._peak_blocks = max(self._peak_blocks, kv_blocks_used)

    def add_steps(self, duration_s: np.ndarray, kv_blocks_used: np.ndarray, tokens_held: np.ndarray) -> None:
        """A decode window's steps (every step holds blocks: its requests')."""
        self._pending.append((duration_s, kv_blocks_used, tokens_held))
        if len(self._pending) >= self.WINDOW_BATCH:
            self._sum_pending()

    def read(self) -> Totals:
        """The totals so far, the windows not summed yet included."""
        self._sum_pending()
        return Totals(self._busy_s, self._block_seconds, self._slot_seconds, self._peak_blocks)

    def _sum_pending(self) -> None:
        if not self._pending:
            return
        durations, blocks, held = (np.concatenate(parts) for parts in zip(*self._pending))
        self._pending = []
        self._busy_s += float(durations.sum())
        self._block_seconds += float((blocks * durations).sum())
        self._slot_seconds += float((held / (blocks * self.block_size) * durations).sum())
        self._peak_blocks = max(self._peak_blocks, int(blocks.max()))
