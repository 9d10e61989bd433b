"""steps.csv's rule for long runs: consecutive identical decode steps become one row.

A simulated run of 10,000 requests has some 400,000 steps, nine in ten of them pure-decode steps that differ
from the step before only by one token of context per request. Written one per row, they make a 29 MB file
that takes longer to format than the run takes to simulate, and say nothing a reader can use. So `planner
simulate --out` merges every maximal run of consecutive steps of one replica that are

- pure decode: no prompt token computed, no draft verified (speculative decoding: its contexts grow by what
  each step accepted) and no preemption in the step, and
- the same batch: equal replica, num_running, num_waiting, num_decode_requests, num_sampled, num_tokens and
  num_seqs (the MERGE_KEYS),

into one row with `num_steps` = how many steps it stands for (a step that merges with nothing is a row of
its own, num_steps = 1). A merged row's `start_s` is its first step's start, `duration_s`, `host_s` and
`device_s` are the sums over its steps (the row spans [start_s, start_s + duration_s)), the MERGE_KEYS are
the per-step values every step shares, and `sum_context_tokens`, `attention_pairs` and `kv_blocks_used`, the
columns that grow during such a run, are its last step's. So tokens computed in a row = num_tokens x
num_steps, and the row's first step had sum_context_tokens - (num_steps - 1) x num_decode_requests tokens
of context. On the 10k benchmark scenario this takes 403,126 rows to 45,134. `planner simulate --all-steps`
writes every step (num_steps = 1 throughout); `planner run` always does, since `planner calibrate --from`
fits single steps.

The rows arrive in chunks (sim.metrics.Recorder's steps_sink) and a run of steps can span chunks:
`DecodeRunMerger` holds back each replica's last row while it can still grow, so the file does not depend
on where the chunks were cut (tests/test_decode_runs.py checks that against the whole table fed at once).
"""

from __future__ import annotations

import numpy as np

MERGE_KEYS = (
    "replica",
    "num_running",
    "num_waiting",
    "num_decode_requests",
    "num_sampled",
    "num_tokens",
    "num_seqs",
)
SUMMED = ("duration_s", "host_s", "device_s")
NUM_STEPS = "num_steps"


def with_num_steps(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """rows with a num_steps column of ones appended (each row one step), unless they have one."""
    if NUM_STEPS in rows:
        return rows
    size = len(next(iter(rows.values()))) if rows else 0
    return {**rows, NUM_STEPS: np.ones(size, dtype=np.int64)}


class DecodeRunMerger:
    """The merging (module docstring) of a table that arrives in chunks: feed() returns the rows that can no
    longer change, sorted by start_s, finish() the rest. Each replica's last row is held back while it is a
    mergeable run, since the next chunk may continue it."""

    def __init__(self) -> None:
        self.pending: dict[str, np.ndarray] | None = None  # at most one row per replica

    def feed(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = with_num_steps(rows)
        if self.pending is not None:
            rows = {name: np.concatenate((self.pending[name], column)) for name, column in rows.items()}
        merged, open_run = _merge(rows)
        self.pending = {name: column[open_run] for name, column in merged.items()}
        return _by_start({name: column[~open_run] for name, column in merged.items()})

    def finish(self) -> dict[str, np.ndarray]:
        rest, self.pending = self.pending, None
        return _by_start(rest) if rest is not None else {}


def _merge(rows: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(merged rows grouped by replica, in time within each; a mask of the rows that end their replica's
    table and are mergeable, i.e. a run that later rows could continue)."""
    size = len(rows["start_s"])
    if size == 0:
        return rows, np.zeros(0, dtype=bool)
    order = np.lexsort((rows["start_s"], rows["replica"]))  # by replica, then by time within each
    rows = {name: column[order] for name, column in rows.items()}
    mergeable = (rows["num_prefill_tokens"] == 0) & (rows["num_preemptions"] == 0)
    mergeable &= rows["num_tokens"] == rows["num_decode_requests"]  # no drafts verified
    continues = mergeable[1:] & mergeable[:-1]
    for key in MERGE_KEYS:
        continues &= rows[key][1:] == rows[key][:-1]
    first = np.flatnonzero(np.concatenate(([True], ~continues)))  # the first row of each merged row
    last = np.concatenate((first[1:], [size])) - 1
    merged = {name: column[last] for name, column in rows.items()}  # MERGE_KEYS and the growing columns
    merged["start_s"] = rows["start_s"][first]
    for name in (*SUMMED, NUM_STEPS):
        merged[name] = np.add.reduceat(rows[name], first)
    replica = merged["replica"]
    ends_replica = np.concatenate((replica[1:] != replica[:-1], [True]))
    return merged, ends_replica & mergeable[last]


def _by_start(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if not rows or len(rows["start_s"]) < 2:
        return rows
    order = np.argsort(rows["start_s"], kind="stable")
    return {name: column[order] for name, column in rows.items()}
