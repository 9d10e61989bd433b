"""Multi-turn sessions (workload.sessions): conversations or agent loops whose every turn re-sends the context.

Sessions start as a Poisson process of `rate` sessions/s; a session has a uniform number of turns in [min_turns,
max_turns], its turns `turn_gap_s` apart on average (exponential gaps, arrival to arrival: the loop is open, a turn
does not wait for the previous reply). With `wait_for_reply` the same turns, drawn alike, are sent each a gap after
its predecessor's reply is complete (the workload's `follows` and `think_s`; the drivers release them as they
release a closed loop's users' requests): only their arrival times then depend on the engine. Turn 1's prompt is
drawn from workload.prompt_tokens; turn k's prompt is turn k-1's prompt, its reply (workload.output_tokens) and a
new message (sessions.message_tokens). Each source draws from its own child of SeedSequence(seed), so both
executors see identical requests.

Prefix identity: a session is one growing stream of tokens, cut in blocks of SESSION_BLOCK_TOKENS, each with an id
of its own (sim/trace_blocks.py's ids: the block's tokens and all before it); a turn's prompt holds the stream's
first blocks, so the next turn finds its whole predecessor's prompt cached. The reply a turn re-sends is the
stream's tokens there, not what the engine generated: the live engine's replies are whatever its weights sample,
so neither executor finds a reply's blocks cached (in vLLM a verbatim re-sent reply would hit; a simplification
that undercounts hits by the replies' share of the context).
A turn past max_model_len ends its session there (counted as rejected, with the turns after it).

`start: steady` begins the run with sessions under way: sessions start at the same rate from WARM_UP_SPANS longest
expected sessions (max_turns x turn_gap_s) before 0, and only their turns from 0 on are sent (a turn's context
still holds its session's earlier turns, which the engine has not seen: a cold cache, as after a restart). With
`wait_for_reply`, a session's first turn sent waits for nothing (its predecessors were before 0): it comes at its time.
"""

from __future__ import annotations

import numpy as np

from sim.config import WorkloadConfig
from sim.workload_draws import TOKEN_STREAM, Workload, draw_lengths, read_only

SESSION_BLOCK_TOKENS = 16  # the stream's block: vLLM's default block size (a larger engine block spans several)
# A steady start's sessions begin this many times max_turns x turn_gap_s before 0: a session of max_turns has a
# duration of max_turns - 1 exponential gaps, more than three times its mean with a chance below 1e-4 for 2 turns
# and far less for more, so the turns from 0 on come at the steady rate.
WARM_UP_SPANS = 3
# Children of SeedSequence(seed) beside the workload's (sim/workload.py: 0-4): the session starts, and per session
# its own stream of turns, gaps and lengths, so a session's draws do not depend on how many sessions are drawn
_STARTS, _SESSION = TOKEN_STREAM + 1, TOKEN_STREAM + 2
_TURNS, _GAPS, _FIRST, _MESSAGES, _REPLIES = range(5)


def session_workload(cfg: WorkloadConfig, max_model_len: int, vocab_size: int | None) -> Workload:
    """The first cfg.num_requests turns, in arrival order, of as many sessions as it takes: sessions are drawn
    until one starts after the n-th earliest turn drawn so far (none after it can have a turn among the first n)."""
    ss, n = cfg.sessions, cfg.num_requests
    starts = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(_STARTS,)))
    # (arrival s, prompt, reply, block ids, session, gap s before it: 0 for a session's first turn)
    turns: list[tuple[float, int, int, tuple[int, ...], int, float]] = []
    rejected_s: list[float] = []  # arrivals of the turns past max_model_len
    start_s = -WARM_UP_SPANS * ss.max_turns * ss.turn_gap_s if ss.start == "steady" else 0.0
    next_id, bound_s = 0, np.inf
    for session in range(MAX_SESSIONS):
        start_s += float(starts.exponential(1.0 / ss.rate))
        if start_s > bound_s:
            break
        next_id = _session(cfg, max_model_len, session, start_s, next_id, turns, rejected_s)
        if bound_s == np.inf and len(turns) >= n:
            bound_s = float(np.partition([t[0] for t in turns], n - 1)[n - 1])
    turns.sort(key=lambda t: t[0])  # stable: ties keep the sessions' order
    kept = turns[:n]
    last_s = kept[-1][0] if kept else 0.0
    follows, think_s = _waits(kept) if ss.wait_for_reply else (None, None)
    return Workload(
        arrival_s=read_only(np.array([t[0] for t in kept], np.float64)),
        prompt_tokens=read_only(np.array([t[1] for t in kept], np.int64)),
        output_tokens=read_only(np.array([t[2] for t in kept], np.int64)),
        prefix_group=read_only(np.full(len(kept), -1, np.int64)),
        prefix_tokens=read_only(np.zeros(len(kept), np.int64)),
        num_rejected=sum(1 for at_s in rejected_s if 0.0 <= at_s <= last_s),
        num_truncated=0,
        seed=cfg.seed,
        vocab_size=vocab_size,
        block_ids=tuple(t[3] for t in kept),
        block_tokens=SESSION_BLOCK_TOKENS,
        follows=read_only(follows),
        think_s=read_only(think_s),
    )


def _waits(kept: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """Per kept turn, the index of the turn whose reply it waits for (-1: a session's first, due at its arrival)
    and its gap after that reply. The first n turns by open-loop arrival hold each one's predecessors (a turn
    arrives after them), so every turn waited for is kept."""
    follows = np.full(len(kept), -1, np.int64)
    last_of: dict[int, int] = {}  # session -> index of its latest kept turn
    for index, turn in enumerate(kept):
        follows[index] = last_of.get(turn[4], -1)
        last_of[turn[4]] = index
    return follows, np.array([t[5] for t in kept])


MAX_SESSIONS = 10_000_000  # far past any workload's (num_requests is at most 10^7 and a session has a turn)


def _session(cfg, max_model_len, session, start_s, first_id, turns, rejected_s) -> int:
    """Draw one session's turns into turns (those past max_model_len into rejected_s); the next free block id."""
    ss = cfg.sessions
    rng = [np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(_SESSION, session, k))) for k in range(5)]
    num_turns = int(rng[_TURNS].integers(ss.min_turns, ss.max_turns, endpoint=True))
    gaps_s = rng[_GAPS].exponential(ss.turn_gap_s, num_turns) if ss.turn_gap_s > 0 else np.zeros(num_turns)
    context = int(draw_lengths(cfg.prompt_tokens, 1, rng[_FIRST], None, None)[0][0])
    messages = draw_lengths(ss.message_tokens, num_turns, rng[_MESSAGES], None, None)[0].tolist()
    replies = draw_lengths(cfg.output_tokens, num_turns, rng[_REPLIES], None, None)[0].tolist()
    at_s = start_s
    for k in range(num_turns):
        if k:
            at_s += float(gaps_s[k])
            context += replies[k - 1] + messages[k]
        if context + replies[k] > max_model_len:  # this turn and the rest of its session
            rejected_s.append(at_s)
            rejected_s.extend(at_s + float(g) for g in np.cumsum(gaps_s[k + 1 :]))
            break
        if at_s < 0:  # a steady start: sent before the run began
            continue
        ids = tuple(range(first_id, first_id + -(-context // SESSION_BLOCK_TOKENS)))
        turns.append((at_s, context, replies[k], ids, session, float(gaps_s[k]) if k else 0.0))
    return first_id + -(-(context + replies[-1]) // SESSION_BLOCK_TOKENS) + 1
