"""steps.csv's merging of identical decode steps (planner.outputs.decode_runs): the rule on a table built by hand, the
streamed merge against merging the whole table, totals kept, and the CLI's two forms of steps.csv."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ROOT

from planner.cli import main
from planner.outputs.decode_runs import NUM_STEPS, DecodeRunMerger
from planner.scenario.load import load_scenario
from sim.driver import simulate
from sim.metrics import STEP_COLUMNS

A10 = str(ROOT / "scenarios" / "a10_qwen7b.yaml")
FLOATS = ("start_s", "duration_s", "host_s", "device_s")


def _table(*rows: dict) -> dict[str, np.ndarray]:
    base = {name: 0 for name in STEP_COLUMNS}
    return {
        name: np.array([{**base, **row}[name] for row in rows], dtype=dtype) for name, dtype in STEP_COLUMNS.items()
    }


def merge_decode_runs(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The whole table fed at once: the reference the chunked merges are compared with."""
    merger = DecodeRunMerger()
    parts = [merger.feed(rows), merger.finish()]
    merged = {name: np.concatenate([p[name] for p in parts if p]) for name in parts[0] or parts[1]}
    order = np.argsort(merged["start_s"], kind="stable")
    return {name: column[order] for name, column in merged.items()}


def _decode(start_s, running, context, blocks, **rest):
    n = rest.pop("n", running)
    return {
        "start_s": start_s,
        "duration_s": 0.01,
        "num_running": running,
        "num_decode_requests": n,
        "num_sampled": n,
        "num_tokens": n,
        "num_seqs": n,
        "sum_context_tokens": context,
        "attention_pairs": context,
        "kv_blocks_used": blocks,
        "host_s": 0.002,
        "device_s": 0.01,
        **rest,
    }


def test_a_run_of_identical_decode_steps_is_one_row_with_its_last_steps_growing_columns():
    table = _table(
        {"start_s": 0.0, "duration_s": 0.05, "num_running": 2, "num_prefill_tokens": 300, "num_tokens": 300},
        _decode(0.05, 2, 302, 20),
        _decode(0.06, 2, 304, 20),
        _decode(0.07, 2, 306, 21),
        _decode(0.08, 2, 308, 21, num_waiting=1),  # the queue changed: a new row
        _decode(0.09, 2, 310, 21, num_waiting=1, num_preemptions=1),  # a preemption merges with nothing
        _decode(0.10, 1, 155, 11),
        _decode(0.11, 1, 156, 11, replica=1),  # another replica's step: not the same run
    )
    merged = merge_decode_runs(table)
    assert merged[NUM_STEPS].tolist() == [1, 3, 1, 1, 1, 1]
    row = {name: column[1] for name, column in merged.items()}
    assert row["start_s"] == 0.05 and row["duration_s"] == pytest.approx(0.03) and row["host_s"] == pytest.approx(0.006)
    assert (row["sum_context_tokens"], row["attention_pairs"], row["kv_blocks_used"]) == (306, 306, 21)
    assert (row["num_running"], row["num_tokens"], row["num_waiting"]) == (2, 2, 0)
    assert merged["replica"].tolist() == [0, 0, 0, 0, 0, 1]


def _steps(scenario: str, *overrides: str) -> dict[str, np.ndarray]:
    """Every step row of a simulated run, in the order the recorder hands them over."""
    chunks = []
    result = simulate(
        load_scenario(scenario, overrides),
        record_steps=True,
        steps_sink=lambda rows: chunks.append({name: column.copy() for name, column in rows.items()}),
    )
    result.recorder.step_rows()  # the last chunk
    return {name: np.concatenate([chunk[name] for chunk in chunks]) for name in chunks[0]}


@pytest.mark.parametrize(
    ("chunk_rows", "overrides"),
    [(1, ()), (7, ()), (100, ()), (1 << 20, ()), (50, ("hardware.replicas=3",))],
)
def test_merging_chunk_by_chunk_gives_the_whole_tables_merge(chunk_rows, overrides):
    steps = _steps(A10, *overrides)
    whole = merge_decode_runs(steps)
    merger, parts = DecodeRunMerger(), []
    for start in range(0, len(steps["start_s"]), chunk_rows):
        parts.append(merger.feed({name: column[start : start + chunk_rows] for name, column in steps.items()}))
    parts.append(merger.finish())
    streamed = {name: np.concatenate([p[name] for p in parts if p]) for name in whole}
    # with several replicas a replica's held-back row may be written after another's later rows: the same rows
    # per replica, in the same order, is the property (one replica: the same file)
    for table in (whole, streamed):
        by_replica = np.argsort(table["replica"], kind="stable")
        table.update({name: column[by_replica] for name, column in table.items()})
    for name in whole:
        if name in FLOATS:
            np.testing.assert_allclose(streamed[name], whole[name], rtol=1e-12, err_msg=name)
        else:
            assert streamed[name].tolist() == whole[name].tolist(), name


def test_the_merged_table_keeps_every_steps_time_and_tokens():
    steps = _steps(A10)
    merged = merge_decode_runs(steps)
    num_steps = len(steps["start_s"])
    assert int(merged[NUM_STEPS].sum()) == num_steps and len(merged["start_s"]) < num_steps / 3
    assert merged["duration_s"].sum() == pytest.approx(steps["duration_s"].sum(), rel=1e-12)
    for count in ("num_tokens", "num_sampled", "num_prefill_tokens", "num_preemptions"):
        assert int((merged[count] * merged[NUM_STEPS]).sum()) == int(steps[count].sum()), count
    # the growing columns are the last step's: the first step's follow from them
    first = merged["sum_context_tokens"] - (merged[NUM_STEPS] - 1) * merged["num_decode_requests"]
    starts = np.searchsorted(steps["start_s"], merged["start_s"])
    assert first.tolist() == steps["sum_context_tokens"][starts].tolist()


def test_simulate_out_writes_merged_rows_and_all_steps_every_step(tmp_path, capsys):
    for name, extra in (("merged", []), ("all", ["--all-steps"])):
        assert main(["simulate", A10, "--out", str(tmp_path / name), "--json", *extra]) == 0
    summary = __import__("json").loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")
    tables = {
        name: np.genfromtxt(tmp_path / name / "steps.csv", delimiter=",", names=True) for name in ("merged", "all")
    }
    assert list(tables["all"].dtype.names) == [*STEP_COLUMNS, NUM_STEPS]
    assert len(tables["all"]) == summary["num_steps"] and set(tables["all"][NUM_STEPS]) == {1}
    assert (
        tables["merged"][NUM_STEPS].sum() == summary["num_steps"] and len(tables["merged"]) < summary["num_steps"] / 3
    )


def test_all_steps_without_out_is_refused(capsys):
    assert main(["simulate", A10, "--all-steps"]) == 2
    assert "--all-steps" in capsys.readouterr().err
