"""Speculative decoding in the live engine: drafts proposed for the scheduler's verify rows, verified by one forward
of the target over 1 + k tokens per row.

The shared scheduler (sim/speculation.py) decides everything a step is made of: which decoding requests verify
drafts and how many, and, from the scenario's seeded draws, how many of them the target accepts (random weights
would accept none). The runner here supplies what only a real engine has: the drafted token ids and the cost of
proposing them and of verifying them. Proposers, as vLLM's (vllm/v1/spec_decode/):

- `NgramProposer` (method ngram): the context's last n tokens (prompt_lookup_max down to prompt_lookup_min) looked
  up earlier in the context, the tokens after the latest match proposed (vLLM's NgramProposer). Random token ids
  rarely repeat an n-gram: where the lookup finds fewer than k tokens, the context's last tokens fill the draft
  (the scheduler's draw, not the lookup, says whether the step drafts).
- `DraftModelProposer` (methods eagle, eagle3, draft_model): the scenario's drafter built from its config with
  random weights (an EAGLE head: one decoder layer and the LM head), its own KV cache in the request's blocks (vLLM
  registers the drafter's layers in the same KV cache config; the scheduler's lookahead slots hold its drafts'
  KV), run k times one after the other: a first pass over the tokens it has not seen yet, then one token per pass.
  An EAGLE-3 head's LM head is over its draft_vocab_size tokens, its logits scattered onto the target's vocabulary
  through its d2t table (target id = draft id + d2t[draft id], -inf elsewhere) before the draft is sampled, as
  vLLM's compute_logits does (vllm/model_executor/models/llama_eagle3.py; eagle.py samples the drafts from them).
  Where it simplifies: it is fed token ids, not the target's hidden states (an EAGLE head's fc input: one layer's
  for eagle, three layers' fused by fc over 3 x hidden for eagle3; the live target does not hand them out, and
  the simulator does not price that projection either); the passes' shapes, the LM head and its KV are the head's.

Drafts are proposed when the verify row that needs them is executed (in vLLM, right after the previous step's
forward): the same work between the same two target forwards, its time counted in the step that verifies them.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from gpu_engine.model import build_model
from gpu_engine.runner import ModelRunner, Scheduled, allocate_kv_caches, build_batch, sample
from gpu_engine.weights import init_random_weights
from sim.config import Scenario, SpeculativeConfig
from sim.draft_cost import DRAFT_COLUMNS, DRAFT_STEP, pass_shape
from sim.request import Request
from sim.speculation import VerifiedTokens

LIVE_METHODS = ("ngram", "eagle", "eagle3", "draft_model")


def unsupported(scenario: Scenario) -> str | None:
    """Why the live engine cannot run this scenario's speculative config; None: it can (or there is none)."""
    spec = scenario.engine.speculative
    if spec is None or spec.method in LIVE_METHODS:
        return None
    # mtp drafts with the target's own multi-token-prediction modules (DeepSeek-V3/R1, Qwen3-Next...): the live
    # model builds none, and the targets that ship them do not run live (MLA, or a model_type it does not implement)
    return (
        f"engine.speculative method {spec.method}: the live model builds no MTP modules (num_nextn_predict_layers),"
        f" and the models that ship them (DeepSeek-V3/R1: MLA) do not run live; it runs {', '.join(LIVE_METHODS)}"
    )


class NgramProposer:
    def __init__(self, spec: SpeculativeConfig) -> None:
        self.k = spec.num_speculative_tokens
        self.max_n = spec.prompt_lookup_max or 5
        self.min_n = spec.prompt_lookup_min or self.max_n

    def propose(self, requests: list[Request]) -> dict[int, list[int]]:
        return {r.request_id: self._lookup(r.token_ids(0, r.num_tokens)) for r in requests}

    @staticmethod
    def shape(requests: list[Request]) -> tuple[int, int, int, int, int]:
        """The lookup's work as a DRAFT_COLUMNS row's shape: the rows and the context tokens it scans."""
        return len(requests), 0, 0, sum(r.num_tokens for r in requests), 0

    def _lookup(self, tokens: list[int]) -> list[int]:
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            suffix = tokens[-n:]
            for start in range(len(tokens) - n - 1, -1, -1):  # the latest earlier match
                if tokens[start : start + n] == suffix:
                    found = tokens[start + n : start + n + self.k]
                    return (found + tokens[-self.k :])[: self.k]
        return (tokens[-self.k :] * self.k)[: self.k]


class _DraftView:
    """What build_batch reads of a request, for the drafter's own pass: its tokens, including drafts so far, and
    how many of them the drafter's KV holds."""

    __slots__ = ("block_ids", "num_computed_tokens", "request_id", "tokens")

    def __init__(self, request: Request, tokens: list[int], computed: int) -> None:
        self.request_id, self.block_ids = request.request_id, request.block_ids
        self.tokens, self.num_computed_tokens = tokens, computed

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    def token_ids(self, start: int, stop: int) -> list[int]:
        return self.tokens[start:stop]


class DraftModelProposer:
    """The drafter: its model and its KV cache (its layers' K/V in the same block ids as the target's)."""

    def __init__(self, spec: SpeculativeConfig, runner: ModelRunner, seed: int) -> None:
        self.k, self.runner = spec.num_speculative_tokens, runner
        self.model = build_model(spec.model, runner.dtype, runner.device)
        init_random_weights(self.model, seed + 1)
        self.spec = spec.model
        self.target_ids = None if not spec.model.draft_vocab_size else self._draft_to_target(seed)
        self.kv_caches = []
        self.seen: dict[int, tuple[int, list[int]]] = {}  # request_id -> (tokens its KV holds, in these blocks)
        self.last_shape = (0, 0, 0, 0, 0)  # the last propose()'s passes, as a DRAFT_COLUMNS row's shape

    def _draft_to_target(self, seed: int) -> torch.Tensor:
        """An EAGLE-3 head's draft ids -> the target's: arange + d2t, its d2t of a checkpoint's form (offsets), for
        random weights a seeded choice of distinct target ids in order (a checkpoint's: the target's most
        frequent tokens in its training data)."""
        draft_vocab = self.spec.draft_vocab_size
        generator = torch.Generator().manual_seed(seed + 2)
        chosen = torch.randperm(self.spec.vocab_size, generator=generator)[:draft_vocab].sort().values
        d2t = chosen - torch.arange(draft_vocab)
        return (torch.arange(draft_vocab) + d2t).to(self.runner.device)

    def _logits(self, batch) -> torch.Tensor:
        """The drafter's logits over the target's vocabulary: [rows, vocab_size]."""
        logits = self.model(batch.input_ids, batch.positions, batch.attn, self.kv_caches)
        if self.target_ids is None:
            return logits
        full = logits.new_full((logits.shape[0], self.spec.vocab_size), float("-inf"))
        full[:, self.target_ids] = logits
        return full

    def allocate(self, num_blocks: int) -> None:
        self.kv_caches = allocate_kv_caches(self.spec, num_blocks, self.runner.block_size, self.runner.dtype,
                                            self.runner.device)  # fmt: skip

    @torch.inference_mode()
    def propose(self, requests: list[Request]) -> dict[int, list[int]]:
        tokens = {r.request_id: r.token_ids(0, r.num_tokens) for r in requests}
        drafts: dict[int, list[int]] = {r.request_id: [] for r in requests}
        first, later_context = (0, 0, 0), 0
        for step in range(self.k):
            views = []
            for r in requests:
                known = tokens[r.request_id] + drafts[r.request_id]
                # the first pass catches up with every token not seen (a preempted request's blocks are new: afresh)
                seen = len(known) - 1
                if step == 0:  # what its KV holds of the request's current blocks (a preempted request's are new)
                    held, blocks = self.seen.get(r.request_id, (0, None))
                    seen = min(held, seen) if blocks is r.block_ids else 0
                views.append(_DraftView(r, known, seen))
            scheduled = [(v, v.num_tokens - v.num_computed_tokens) for v in views]
            if step == 0:  # its tokens, (query, key) pairs and context, as SchedulerOutput.add counts them
                first = pass_shape([(v.num_computed_tokens, n) for v, n in scheduled])
            else:
                later_context += sum(v.num_tokens for v in views)
            batch = build_batch(scheduled, self.runner.block_size, self.runner.device)
            logits = self._logits(batch)
            for r, token in zip(requests, sample(logits, self.runner.sampling, self.runner.generator).tolist()):
                drafts[r.request_id].append(token)
        for r in requests:
            self.seen[r.request_id] = (len(tokens[r.request_id]), r.block_ids)
        # later passes: their contexts' mean, the one sum_context_tokens the simulator prices them with
        self.last_shape = (len(requests), *first, later_context / max(self.k - 1, 1))
        return drafts

    def shape(self, requests: list[Request]) -> tuple:
        return self.last_shape


class SpeculativeRunner:
    """A ModelRunner whose verify rows carry drafts: execute() proposes the drafts its rows need, runs the target
    over every row's tokens and returns, per verify row, the drafts and the target's token at each position."""

    def __init__(self, runner: ModelRunner, spec: SpeculativeConfig, seed: int) -> None:
        self.runner = runner
        self.proposer = NgramProposer(spec) if spec.method == "ngram" else DraftModelProposer(spec, runner, seed)
        self.draft_s = 0.0  # wall seconds spent proposing
        self.draft_rows: list[tuple] = []  # per step that drafted: its seconds and shape (sim.draft_cost.DRAFT_COLUMNS)
        self.draft_steps: list[int] = []  # per row of draft_rows: its step's index among the recorder's steps

    def reset_drafting(self) -> None:
        """Forget what was drafted so far (warm-up's drafting is not the run's)."""
        self.draft_s, self.draft_rows, self.draft_steps = 0.0, [], []

    def mark_step(self, index: int) -> None:
        """Key the drafting of the step just executed, if it drafted, by that step's index among the recorder's
        steps (its row in `planner run --out`'s steps.csv, which holds the drafting inside its device_s)."""
        self.draft_steps += [index] * (len(self.draft_rows) - len(self.draft_steps))

    def drafting_rows(self) -> dict[str, np.ndarray]:
        """Every step that drafted: its seconds and shape, in DRAFT_COLUMNS, and (DRAFT_STEP) the step's index
        where mark_step gave one (-1 where not)."""
        table = np.array(self.draft_rows, dtype=np.float64).reshape(-1, len(DRAFT_COLUMNS))
        steps = self.draft_steps + [-1] * (len(self.draft_rows) - len(self.draft_steps))
        return {DRAFT_STEP: np.array(steps, dtype=np.int64)} | {n: table[:, i] for i, n in enumerate(DRAFT_COLUMNS)}

    def __getattr__(self, name: str):  # profiling, warm-up and the loop read the runner's own attributes
        return getattr(self.runner, name)

    def allocate(self, num_blocks: int) -> None:
        self.runner.allocate(num_blocks)
        if isinstance(self.proposer, DraftModelProposer):
            self.proposer.allocate(num_blocks)

    @torch.inference_mode()
    def execute(self, scheduled: Scheduled) -> dict[int, int | VerifiedTokens]:
        verifying = [r for r, n in scheduled if r.num_computed_tokens + n > r.num_tokens]
        start = time.perf_counter()
        drafts = self.proposer.propose(verifying) if verifying else {}
        seconds = time.perf_counter() - start
        self.draft_s += seconds
        if verifying:  # what `planner calibrate` fits the drafting terms to (planner/calibration/draft_fit.py)
            self.draft_rows.append((seconds, *self.proposer.shape(verifying)))
        if not drafts:
            return self.runner.execute(scheduled)
        runner = self.runner
        batch = build_batch(scheduled, runner.block_size, runner.device, runner.block_rows, drafts)
        targets = runner.run(batch, runner.kv_caches).tolist()
        out, row = {}, 0
        for request_id, count in zip(batch.sampled_request_ids, batch.logits_per_request):
            if request_id in drafts:
                out[request_id] = VerifiedTokens(drafts[request_id][: count - 1], targets[row : row + count])
            else:
                out[request_id] = targets[row]
            row += count
        return out
