"""A trace's token counts are whole numbers, and its header names its columns whatever marks the file starts
with: what a fuzzing round found read otherwise (10.7 tokens rounded to 11, "10" taken for a number, a
byte-order mark glued to the first column's name)."""

from __future__ import annotations

import re

import pytest

from planner.scenario.load import load_scenario
from sim.errors import WorkloadError
from sim.trace_file import read_trace
from sim.workload import generate_workload


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("t.csv", "t,p,o\n0,10.7,10\n", "line 2, column 2 ('p'): \"10.7\": must be a whole number of tokens in [0, "),
        ("t.jsonl", '{"t": 0, "p": 10.5, "o": 1}\n', "line 1, key 'p': 10.5: must be a whole number of tokens"),
        ("t.jsonl", '{"t": 0, "p": "10", "o": 1}\n', "line 1, key 'p': \"10\" is not a number (a token count)"),
    ],
)
def test_a_token_count_that_is_no_whole_number_is_refused(tmp_path, name, content, words):
    # 10.7 tokens became 11 without a word; a JSON string passed for a number.
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(WorkloadError, match=re.escape(f"trace file {path}: {words}")):
        read_trace(path, ["t", "p", "o"], "t")


def test_a_trace_with_a_byte_order_mark_names_its_columns(tmp_path):
    # The scenario check read the header with the mark, so its first column was "\ufeffarrived_at".
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"\xef\xbb\xbfarrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1,20,6\n")
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(
        "model: qwen-7b\nhardware: {gpu: a10}\nworkload: {num_requests: 2, arrival: {process: trace},"
        " prompt_tokens: {dist: trace}, output_tokens: {dist: trace}, trace: {path: t.csv}}\n"
    )
    workload = load_scenario(scenario_file).workload
    assert generate_workload(workload, 4096).prompt_tokens.tolist() == [10, 20]
