"""The seeded draws a workload is made of, shared by the workload generator (sim/workload.py) and the sessions
generator (sim/sessions.py): the random streams, the length draws and the `Workload` record they fill."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.config import Distribution

# Children of SeedSequence(cfg.seed): fixed numbers, so adding a source never moves an existing stream.
ARRIVAL_STREAM, PROMPT_STREAM, OUTPUT_STREAM, TRACE_ROW_STREAM, TOKEN_STREAM = range(5)
NUM_STREAMS = 5
# grandchildren of TOKEN_STREAM: per shared-prefix group, per request, per trace block id
_PREFIX_IDS, _REQUEST_IDS, _TRACE_BLOCK_IDS = 0, 1, 2
LENGTH_CEILING = 1 << 40  # the longest length kept (see draw_lengths)


# A normal or lognormal length distribution whose clipping to [min, max] moves the drawn mean by more than this
# share of the asked mean is said (normal mean 200, std 300 for replies: 25% become 1 token, mean 248).
CLIP_NOTICE = 0.02


@dataclass(frozen=True)
class Clipped:
    """A length distribution that clipping to its [min, max] changed: the share of draws clipped, and the mean
    of the draws before and after."""

    field: str  # prompt_tokens | output_tokens
    share: float
    mean_before: float
    mean_after: float


@dataclass(frozen=True, eq=False)
class Workload:
    """The requests as a struct of read-only arrays; index i is request i, in arrival order.

    `arrival_s` is None for a closed loop: the driver keeps `concurrency` users busy, each issuing the
    next request `think_time_s` after its previous reply (its first at `user_start_s`).
    """

    arrival_s: np.ndarray | None  # float64 [n], seconds from 0, non-decreasing
    prompt_tokens: np.ndarray  # int64 [n]
    output_tokens: np.ndarray  # int64 [n], forced: EOS is ignored
    prefix_group: np.ndarray  # int64 [n], -1: no shared prefix
    prefix_tokens: np.ndarray  # int64 [n], leading prompt tokens shared by the whole group
    num_rejected: int  # dropped by too_long = reject
    num_truncated: int  # cut by too_long = truncate
    seed: int  # the config's seed: prompt_token_ids' default
    vocab_size: int | None = None  # prompt_token_ids' default
    concurrency: int | None = None  # closed loop: users
    think_time_s: float = 0.0  # closed loop: pause between a reply and that user's next request
    clipped: tuple[Clipped, ...] = ()  # length distributions that clipping to [min, max] changed
    # Prefix identity from a trace: request i's prompt block ids, each naming block_tokens prompt tokens (the
    # ids cover at most its prompt; tokens past them are its own). None: no ids.
    block_ids: tuple[tuple[int, ...], ...] | None = None
    block_tokens: int = 0
    # Sessions whose turns wait for replies (sim/sessions.py): request i is sent think_s[i] after request
    # follows[i]'s reply is complete; follows[i] = -1: at arrival_s[i]. None: every request at its arrival_s.
    follows: np.ndarray | None = None  # int64 [n]
    think_s: np.ndarray | None = None  # float64 [n]

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    @property
    def closed_loop(self) -> bool:
        """Whether some request is sent when another's reply is complete (a user's, a waiting session's turn)."""
        return self.arrival_s is None or self.follows is not None

    def next_turns(self) -> np.ndarray:
        """Per request, the index of the one sent after its reply (-1: none): follows inverted."""
        after = np.full(len(self), -1, np.int64)
        waiting = np.flatnonzero(self.follows >= 0)
        after[self.follows[waiting]] = waiting
        return after

    def user_start_s(self, user: int) -> float:
        """When closed-loop user `user` (0, 1, ...) sends its first request: the users' first requests spread
        evenly over one think time, as independent users' would be (all at 0 without think time, as vLLM's
        bench runs at a max concurrency). Users who all started at once stayed in step when their requests
        were alike, every prefill landing together cycle after cycle, and the burst at 0 weighed on a short
        run's percentiles: a sizing search found 14 users per A100 where, started apart, 24 met the SLOs."""
        return self.think_time_s * user / (self.concurrency or 1)


def draw_lengths(
    dist: Distribution, n: int, rng: np.random.Generator, trace_values: np.ndarray | None, rows: np.ndarray | None
) -> tuple[np.ndarray, tuple[float, float, float] | None]:
    """The lengths, and for a `normal` or `lognormal` whose clipping to [min, max] moved the mean by more than
    CLIP_NOTICE of it, (share clipped, mean before, mean after clipping): the same draws, so the shift is the
    clipping's, not sampling noise. `lognormal`'s mean and std are of the lengths themselves; the underlying
    normal has sigma^2 = ln(1 + std^2/mean^2) and mu = ln(mean) - sigma^2/2."""
    kind = dist.dist
    if kind == "fixed":
        lengths = np.full(n, dist.value)
    elif kind == "uniform":
        lengths = rng.integers(dist.low, dist.high, n, endpoint=True)
    elif kind == "normal":
        lengths = rng.normal(dist.mean, dist.std, n)
    elif kind == "lognormal":
        sigma2 = np.log1p((dist.std / dist.mean) ** 2)
        lengths = rng.lognormal(np.log(dist.mean) - sigma2 / 2, np.sqrt(sigma2), n)
    elif kind == "trace":
        lengths = trace_values[rows]
    else:
        raise ValueError(f"unknown length distribution {kind!r}")
    # Past LENGTH_CEILING every length is rejected or truncated alike (max_model_len is far below it): the
    # ceiling only keeps a draw of 1e30 from overflowing int64.
    upper = LENGTH_CEILING if dist.max is None else min(dist.max, LENGTH_CEILING)
    rounded = np.rint(lengths)
    out = np.clip(rounded, dist.min, upper).astype(np.int64)
    if kind not in ("normal", "lognormal") or not n:
        return out, None
    before, after = float(rounded.mean()), float(out.mean())
    if abs(after - before) <= CLIP_NOTICE * dist.mean:
        return out, None
    return out, (float(np.mean((rounded < dist.min) | (rounded > upper))), before, after)


def read_only(values: np.ndarray | None) -> np.ndarray | None:
    if values is not None:
        values.setflags(write=False)
    return values
