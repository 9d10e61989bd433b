"""One serving model, two executors: `planner simulate` and `planner run --device cpu` decide the same steps
(tests/helpers/parity.py says how), case by case; each case also shows it exercised what it is named for."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")  # the live engine

from helpers.parity import CASES, Decisions, assert_same_decisions, measured, simulated


def _prompt_split(d: Decisions) -> bool:
    """A prompt computed over more than one step (before its first token)."""
    prompt = {request_id: p for request_id, p, _, _ in d.requests}
    first_chunks = {}
    for rows, _, _ in d.log:
        for request_id, n in rows:
            first_chunks.setdefault(request_id, n)
    return any(first_chunks[i] < prompt[i] for i in prompt)


def _prefill_tokens(d: Decisions) -> int:
    return sum(row["num_prefill_tokens"] for row in d.rows)


EXERCISES = {  # case -> what its run must show, or the parity proves less than its name says
    "plain": lambda d: not _prompt_split(d) and not any(r[3] for r in d.requests),
    "chunked": _prompt_split,
    "preempting": lambda d: sum(r[3] for r in d.requests) > 0 and sum(row["num_preemptions"] for row in d.rows) > 0,
    # cache hits: fewer prompt tokens computed than the prompts hold
    "prefix-sharing": lambda d: _prefill_tokens(d) < sum(r[1] for r in d.requests),
    # a batch's finished members stay as idle rows until its longest reply is done
    "static": lambda d: any(row["num_seqs"] > len(rows) for row, (rows, _, _) in zip(d.rows, d.log)),
    # steps that verified drafts: more tokens than their prompt tokens and one per decoding row
    "speculative-head": lambda d: any(
        r["num_tokens"] > r["num_prefill_tokens"] + r["num_decode_requests"] for r in d.rows
    ),
    "speculative-eagle3": lambda d: any(
        r["num_tokens"] > r["num_prefill_tokens"] + r["num_decode_requests"] for r in d.rows
    ),
    # ... and, n-gram drafting in only some steps, decode steps without drafts too
    "speculative-ngram": lambda d: (
        any(r["num_tokens"] > r["num_prefill_tokens"] + r["num_decode_requests"] for r in d.rows)
        and any(0 < r["num_decode_requests"] == r["num_tokens"] for r in d.rows)
    ),
    # every prompt computed on the prefill engine (pool 0), every reply on the decode engine (pool 1), whose
    # first step of each request recomputes the prompt's last token only (the rest was pulled)
    "pd-pair": lambda d: (
        sum(row["num_prefill_tokens"] for row in d.rows if row["pool"] == 0) == sum(r[1] for r in d.requests)
        and sum(row["num_tokens"] for row in d.rows if row["pool"] == 1) == sum(r[2] for r in d.requests)
    ),
    # requests on both ranks, and steps where only one rank had work (the other's dummy batch): unequal row counts
    "data-parallel": lambda d: (
        {row["replica"] for row in d.rows} == {0, 1}
        and sum(row["replica"] == 0 for row in d.rows) != sum(row["replica"] == 1 for row in d.rows)
    ),
    # ... and verify rows (more tokens than prompt tokens and decoding rows) on both ranks
    "data-parallel-ngram": lambda d: (
        {row["replica"] for row in d.rows if row["num_tokens"] > row["num_prefill_tokens"] + row["num_decode_requests"]}
        == {0, 1}
    ),
    # cache hits where the trace's ids repeat: the prompts less the hits are computed
    "trace-prefix-ids": lambda d: _prefill_tokens(d) < sum(r[1] for r in d.requests),
    # ... and on the host tier's scenario, more hits than the GPU pool alone keeps (tests/test_kv_offload.py
    # checks that the tier found some of them)
    "host-tier": lambda d: _prefill_tokens(d) < sum(r[1] for r in d.requests),
    # ... and on the disk tier's (tests/test_disk_tier.py checks that both tiers found some of them)
    "disk-tier": lambda d: _prefill_tokens(d) < sum(r[1] for r in d.requests),
    # every turn alone in its steps (it waited for the last reply: sent open loop without gaps, all ten would
    # arrive together) and each finding its predecessor's prompt cached
    "session-waits": lambda d: (
        len(d.requests) == 10
        and all(row["num_seqs"] == 1 for row in d.rows)
        and _prefill_tokens(d) < sum(r[1] for r in d.requests)
    ),
}


def test_every_case_says_what_it_exercises():
    assert EXERCISES.keys() == CASES.keys()


@pytest.mark.parametrize("case", CASES)
def test_simulate_and_run_decide_the_same_steps(case, tmp_path, monkeypatch):
    sim = simulated(case, tmp_path, monkeypatch)
    live = measured(case, tmp_path, monkeypatch)
    assert EXERCISES[case](sim), f"the {case} case did not exercise it"
    assert_same_decisions(sim, live)
