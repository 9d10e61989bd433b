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


WAIT = ["workload.num_requests=600", "workload.sessions.wait_for_reply=true"]


def test_waiting_turns_are_the_same_turns_sent_after_each_reply():
    s, waits = _workload(WAIT)
    _, opens = _workload(WAIT[:1])
    # the same requests, drawn alike; only when they are sent differs
    assert np.array_equal(waits.prompt_tokens, opens.prompt_tokens) and waits.block_ids == opens.block_ids
    assert np.array_equal(waits.output_tokens, opens.output_tokens) and opens.follows is None
    done = simulate(s, record_steps=False).recorder.requests.view()
    by_id = {int(i): k for k, i in enumerate(done["request_id"])}
    sent, finished = done["arrival_s"], done["finished_s"]
    waited = 0
    for turns in _sessions(waits):
        first = by_id[turns[0]]
        assert waits.follows[turns[0]] == -1 and sent[first] == waits.arrival_s[turns[0]]
        for a, b in pairwise(turns):
            assert waits.follows[b] == a
            # sent its think time after the predecessor's reply: the open loop's gap, drawn alike
            assert sent[by_id[b]] == pytest.approx(finished[by_id[a]] + waits.think_s[b], abs=1e-9)
            assert waits.think_s[b] == pytest.approx(opens.arrival_s[b] - opens.arrival_s[a])
            waited += sent[by_id[b]] > opens.arrival_s[b]
    assert waited > 100  # turns the open loop sent before their predecessor's reply was back


def test_the_live_engine_releases_a_waiting_turn_after_its_predecessors_reply():
    pytest.importorskip("torch")  # the live engine
    from gpu_engine.engine import Arrivals

    _, wl = _workload(WAIT)
    arrivals = Arrivals(wl)
    firsts = [i for i in range(len(wl)) if wl.follows[i] < 0]
    assert [index for _, index in arrivals.pop_due(np.inf)] == firsts
    second = int(wl.next_turns()[firsts[0]])
    arrivals.reply_done(100.0, firsts[0])
    assert arrivals.pop_due(np.inf) == [(100.0 + wl.think_s[second], second)]


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
        (["workload.sessions.wait_for_reply=1"], "workload.sessions.wait_for_reply = 1: expected true or false"),
    ],
)
def test_bad_sessions_are_refused(capsys, overrides, words):
    args = ["simulate", str(AGENT)]
    for item in overrides:
        args += ["--set", item]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
