"""The recorder's step rows kept as they come (sim/step_rows.py) read back as writing them row by row gives them."""

from __future__ import annotations

import numpy as np
import pytest

from sim.columns import Columns
from sim.metrics import STEP_COLUMNS
from sim.step_rows import StepRows, WindowRecord


def _written_row_by_row(records: list) -> dict[str, np.ndarray]:
    """The reference: each record written into the columns as it comes (what the recorder did before)."""
    table = Columns(STEP_COLUMNS)
    for record in records:
        if isinstance(record, tuple) and not isinstance(record, WindowRecord):
            table.append(**dict(zip(STEP_COLUMNS, record)))
            continue
        w, n = record, len(record.duration_s)
        num_waiting = np.full(n, w.num_waiting)
        num_waiting[-1] = w.num_waiting_after
        num_running = w.num_running_after
        if not isinstance(w.num_rows, int):
            num_running = np.append(w.num_rows[1:], w.num_running_after)
        table.extend(
            replica=w.replica,
            start_s=w.end_s - w.duration_s,
            duration_s=w.duration_s,
            num_running=num_running,
            num_waiting=num_waiting,
            num_prefill_tokens=0,
            num_decode_requests=w.num_rows,
            num_sampled=w.num_rows,
            sum_context_tokens=w.sum_context_tokens,
            attention_pairs=w.sum_context_tokens,
            kv_blocks_used=w.kv_blocks_used,
            num_preemptions=0,
            num_tokens=w.num_rows,
            num_seqs=w.num_rows,
            host_s=w.host_s,
            device_s=w.device_s,
        )
    return table.view()


def _records(rng: np.random.Generator, num_records: int) -> list:
    records, now = [], 0.0
    for _ in range(num_records):
        if rng.random() < 0.4:  # a stepped step
            duration = float(rng.uniform(0.01, 0.05))
            row = [now, duration, *rng.integers(0, 300, size=12).tolist(), float(rng.uniform(0, 0.01)), duration]
            records.append(tuple(row))
            now += duration
            continue
        n = int(rng.integers(1, 40))
        durations = rng.uniform(0.01, 0.03, size=n)
        ends = now + durations.cumsum()
        now = float(ends[-1])
        rows: int | np.ndarray = int(rng.integers(1, 60))
        if rng.random() < 0.5:  # requests finish in it: the rows shrink
            rows = np.sort(rng.integers(1, 60, size=n))[::-1].copy()
        host = float(rng.uniform(0, 0.01)) if rng.random() < 0.5 else rng.uniform(0, 0.01, size=n)
        records.append(
            WindowRecord(
                replica=int(rng.integers(0, 3)),
                end_s=ends,
                duration_s=durations,
                num_rows=rows,
                num_running_after=int(rng.integers(0, 60)),
                num_waiting=int(rng.integers(0, 5)),
                num_waiting_after=int(rng.integers(0, 9)),
                sum_context_tokens=rng.integers(100, 10**6, size=n),
                kv_blocks_used=rng.integers(1, 5000, size=n),
                host_s=host,
                device_s=rng.uniform(0.01, 0.03, size=n),
            )
        )
    return records


def _add(rows: StepRows, record) -> None:
    if isinstance(record, WindowRecord):
        rows.add_window(record)
    else:
        rows.add_step(record)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("settle_rows", [8192, 50])  # 50: put into the columns unread, over and over
def test_rows_read_back_as_written_row_by_row_whenever_read(seed, settle_rows, monkeypatch):
    monkeypatch.setattr("sim.step_rows.SETTLE_ROWS", settle_rows)
    rng = np.random.default_rng(seed)
    records = _records(rng, 300)
    rows = StepRows(STEP_COLUMNS)
    for i, record in enumerate(records):
        _add(rows, record)
        if rng.random() < 0.03:  # read in the middle: the rows so far go into the columns
            assert rows.view()["start_s"].size == rows.size
    expected, got = _written_row_by_row(records), rows.view()
    assert rows.size == len(expected["start_s"]) and rows.num_pending == 0
    for name, dtype in STEP_COLUMNS.items():
        assert got[name].dtype == dtype, name
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_only_steps_only_windows_and_clearing():
    rng = np.random.default_rng(7)
    records = _records(rng, 200)
    for kept in (
        [r for r in records if isinstance(r, WindowRecord)],
        [r for r in records if not isinstance(r, WindowRecord)],
    ):
        rows = StepRows(STEP_COLUMNS)
        for record in kept:
            _add(rows, record)
        expected = _written_row_by_row(kept)
        for name in STEP_COLUMNS:
            np.testing.assert_array_equal(rows.view()[name], expected[name], err_msg=name)
        rows.clear()
        assert rows.size == 0 and all(len(column) == 0 for column in rows.view().values())
    assert StepRows(STEP_COLUMNS).view()["duration_s"].size == 0  # nothing recorded
