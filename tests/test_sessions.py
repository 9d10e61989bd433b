"""Multi-turn sessions (workload.sessions): each turn's prompt is the previous turn's prompt, reply and a new
message, seeded and identical for both executors; the prefix cache finds each turn's predecessor; bad sessions are
refused (exit 2)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from helpers import ROOT

from planner.cli import main
from planner.scenario.load import load_scenario
from sim.driver import simulate
from sim.metrics import summarize
from sim.sessions import SESSION_BLOCK_TOKENS
from sim.workload import generate_workload, prompt_token_ids

AGENT = ROOT / "scenarios" / "h100_llama31_8b_agent_sessions.yaml"
LIGHT = ["workload.num_requests=300", "workload.sessions.rate=0.05", "engine.kv_offload=null"]


def _workload(overrides=()):
    s = load_scenario(AGENT, list(overrides))
    return s, generate_workload(s.workload, s.max_model_len, vocab_size=1000)


def _sessions(wl) -> list[list[int]]:
    """Request indices by session, in arrival order (a session's ids all start at its first turn's first id)."""
    by_first: dict[int, list[int]] = {}
    for i, ids in enumerate(wl.block_ids):
        by_first.setdefault(ids[0], []).append(i)
    return list(by_first.values())


def test_a_turn_resends_the_previous_prompt_and_reply_and_adds_a_message():
    _, wl = _workload(["workload.num_requests=400"])
    sessions = _sessions(wl)
    assert len(sessions) > 10 and max(len(t) for t in sessions) >= 5
    assert np.all(np.diff(wl.arrival_s) >= 0)
    for turns in sessions:
        for a, b in pairwise(turns):
            message = wl.prompt_tokens[b] - wl.prompt_tokens[a] - wl.output_tokens[a]
            assert message >= 1 and wl.arrival_s[b] >= wl.arrival_s[a]
            assert wl.block_ids[b][: len(wl.block_ids[a])] == wl.block_ids[a]  # the same stream, longer
            assert len(wl.block_ids[b]) == -(-int(wl.prompt_tokens[b]) // SESSION_BLOCK_TOKENS)
    # the live engine's tokens: a turn's prompt begins with its predecessor's, token for token
    a, b = sessions[0][:2]
    assert prompt_token_ids(wl, b)[: wl.prompt_tokens[a]] == prompt_token_ids(wl, a)


def test_sessions_are_seeded():
    _, one = _workload(["workload.num_requests=200"])
    _, again = _workload(["workload.num_requests=200"])
    _, other = _workload(["workload.num_requests=200", "workload.seed=1"])
    assert np.array_equal(one.arrival_s, again.arrival_s) and one.block_ids == again.block_ids
    assert not np.array_equal(one.prompt_tokens, other.prompt_tokens)
    # the first n turns of more requests are these: sessions drawn until none can add an earlier turn
    _, more = _workload(["workload.num_requests=400"])
    assert np.array_equal(more.arrival_s[:200], one.arrival_s) and more.block_ids[:200] == one.block_ids


def test_each_turn_finds_its_predecessors_prompt_cached_at_light_load():
    s, wl = _workload(LIGHT)
    summary = summarize(simulate(s, record_steps=False).recorder, s.slo)
    expected = sum(
        int(wl.prompt_tokens[a]) // 16 * 16 for turns in _sessions(wl) for a in turns[:-1]
    )  # the predecessor's full blocks; its reply was generated, not re-sent token for token
    assert summary["prefix_cache"]["hit_tokens"] == expected


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["workload.sessions.min_turns=0"], "workload.sessions.min_turns = 0: must be in [1, 10,000] turns"),
        (["workload.sessions.max_turns=3"], "workload.sessions.min_turns = 5: must be <= max_turns (3)"),
        (
            ["workload.arrival={process: poisson, rate: 2}"],
            "workload.arrival: cannot be combined with workload.sessions",
        ),
        (["workload.too_long=truncate"], 'workload.too_long = "truncate": must be reject with workload.sessions'),
    ],
)
def test_bad_sessions_are_refused(capsys, overrides, words):
    args = ["simulate", str(AGENT)]
    for item in overrides:
        args += ["--set", item]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
