"""The recorder's step rows, kept as they come and put into typed columns only when read.

A stepped step's values are one tuple; a decode window's are the arrays it was priced and applied with (its
end times, durations, rows, contexts, blocks in use, host and device seconds) and a few ints. Writing each
record into sixteen typed columns as it came cost a numpy assignment per column per record (per window: sixteen
slices, and the arrays for its queue and running counts); here a record costs one list append, and the columns
are filled when read, a column at a time over every record since the last read: one `np.concatenate` of the
windows' arrays and one conversion of the steps' values, placed by one mask. The values are the same, in the
same rows (tests/test_step_rows.py holds them to writing row by row).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.columns import Columns

# Rows kept as they came before they are put into the columns unread: a window's arrays are often views of the
# longer arrays it was priced with, which they keep alive; this many rows' worth keeps that to a few MB.
SETTLE_ROWS = 8192


class WindowRecord(NamedTuple):
    """A decode window's steps as Recorder.decode_window gets them (one element a step; an int or a float:
    every step's)."""

    replica: int
    end_s: np.ndarray
    duration_s: np.ndarray
    num_rows: np.ndarray | int  # requests decoding in each step
    num_running_after: int  # requests running after the window's last step
    num_waiting: int  # queued during every step but the last
    num_waiting_after: int  # queued after the last
    sum_context_tokens: np.ndarray
    kv_blocks_used: np.ndarray
    host_s: np.ndarray | float
    device_s: np.ndarray | float


class StepRows:
    """Step rows in the columns of `dtypes` (the recorder's STEP_COLUMNS): add_step takes a row as a tuple in
    their order, add_window a `WindowRecord`; view() returns every row so far, in the order they were added."""

    def __init__(self, dtypes: dict[str, type]) -> None:
        self.dtypes = dtypes
        self.table = Columns(dtypes)  # the rows put into columns by the last read
        self._lengths: list[int] = []  # per record, in order: 0 a step, n > 0 a window of n steps
        self._steps: list[tuple] = []
        self._windows: list[WindowRecord] = []
        self.num_pending = 0  # rows added since the last read

    @property
    def size(self) -> int:
        return self.table.size + self.num_pending

    def add_step(self, row: tuple) -> None:
        self._lengths.append(0)
        self._steps.append(row)
        self.num_pending += 1
        if self.num_pending >= SETTLE_ROWS:
            self.settle()

    def add_window(self, window: WindowRecord) -> None:
        n = len(window.duration_s)
        self._lengths.append(n)
        self._windows.append(window)
        self.num_pending += n
        if self.num_pending >= SETTLE_ROWS:
            self.settle()

    def view(self) -> dict[str, np.ndarray]:
        self.settle()
        return self.table.view()

    def clear(self) -> None:
        """Drop every row (a chunk handed over to a sink)."""
        self.settle()
        self.table.size = 0

    def settle(self) -> None:
        """Put the rows added since the last read into the columns."""
        if not self.num_pending:
            return
        lengths = np.array(self._lengths)
        is_step = np.repeat(lengths == 0, np.maximum(lengths, 1))  # each row: from a step, or from a window
        columns = {name: np.empty(len(is_step), dtype) for name, dtype in self.dtypes.items()}
        if self._steps:
            for (name, column), values in zip(columns.items(), zip(*self._steps)):
                column[is_step] = values
        if self._windows:
            from_window = ~is_step
            for name, values in _window_columns(self._windows, lengths[lengths > 0]).items():
                columns[name][from_window] = values
        self.table.extend(**columns)
        self._lengths, self._steps, self._windows, self.num_pending = [], [], [], 0


def _window_columns(windows: list[WindowRecord], lengths: np.ndarray) -> dict[str, np.ndarray | int]:
    """The step columns of these windows' rows, one after the other (lengths: their steps)."""
    fields = WindowRecord(*zip(*windows))  # each field: a tuple over the windows
    ends = lengths.cumsum() - 1  # each window's last row
    end_s, duration_s = np.concatenate(fields.end_s), np.concatenate(fields.duration_s)
    num_rows = _concatenate(fields.num_rows, lengths)
    context = np.concatenate(fields.sum_context_tokens)
    running_after = np.array(fields.num_running_after)
    # A step's running requests are counted after it: the next step's rows, the window's last step's are those
    # left after the window. A window of one count of rows has nobody finishing: that count after every step.
    num_running = np.empty_like(num_rows)
    num_running[:-1] = num_rows[1:]
    num_running[ends] = running_after
    one_count = np.repeat([isinstance(rows, int) for rows in fields.num_rows], lengths)
    num_running[one_count] = np.repeat(running_after, lengths)[one_count]
    num_waiting = np.repeat(fields.num_waiting, lengths)
    num_waiting[ends] = fields.num_waiting_after
    return {
        "start_s": end_s - duration_s,
        "duration_s": duration_s,
        "num_running": num_running,
        "num_waiting": num_waiting,
        "num_prefill_tokens": 0,
        "num_decode_requests": num_rows,
        "num_sampled": num_rows,
        "sum_context_tokens": context,
        "attention_pairs": context,  # a decode token attends over its whole context
        "kv_blocks_used": np.concatenate(fields.kv_blocks_used),
        "num_preemptions": 0,
        "replica": np.repeat(fields.replica, lengths),
        "num_tokens": num_rows,
        "num_seqs": num_rows,
        "host_s": _concatenate(fields.host_s, lengths),
        "device_s": _concatenate(fields.device_s, lengths),
    }


def _concatenate(values: tuple, lengths: np.ndarray) -> np.ndarray:
    """Each window's array, or its one value repeated over its steps, one after the other."""
    if not any(isinstance(v, np.ndarray) for v in values):
        return np.repeat(values, lengths)
    return np.concatenate([v if isinstance(v, np.ndarray) else np.full(n, v) for v, n in zip(values, lengths.tolist())])
