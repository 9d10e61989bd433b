"""What drafting costs in a speculative engine's step, per method (the verification itself is the target's step
with 1 + k query tokens per decoding row, which sim/cost_model.py prices with its own terms: weights read once,
flops, attention and the KV writes over every query token, the LM head over every verified row).

- eagle, eagle3, mtp, draft_model: the drafter (sim/draft_model.py: an EAGLE head, the target's MTP layers, a whole
  draft model) is priced by the same cost model over its own facts (sim/engine_facts.py), pass by pass, as vLLM's
  proposers run it after the target's forward (vllm/v1/spec_decode/eagle.py `propose`): a first pass over every
  token the step scheduled (the drafter keeps its own KV of the prompt too, and takes the target's hidden states of
  each token), whose sampled rows give the first drafts, then k - 1 passes of one token per drafting row, one after
  the other (each draft depends on the previous one). A pass of the drafter pays its own launches and graphs as
  any step does: vLLM captures CUDA graphs for the drafter's one-token passes too.
- ngram: no model; the lookup runs on the host between the target's forward and the next step (vLLM's
  NgramProposer, numba over each drafting request's whole context, vllm/v1/spec_decode/ngram_proposer.py), serial
  with the device: seconds per context token scanned, `NGRAM_S_PER_CONTEXT_TOKEN`.

A calibration profile may hold the drafting terms fitted to the live engine's timed drafting
(planner/calibration/draft_fit.py): `draft_pass_overhead_s`, a fixed cost added to every drafter pass, or
`ngram_s_per_context_token` in place of the estimate and `ngram_overhead_s` per lookup. Without them (every
shipped profile) drafting is priced as above.

Where the planner simplifies: the later passes attend over the rows' contexts after the step (a draft's own few
tokens beyond them are not counted); the fusion projection that feeds the target's hidden states to an EAGLE head
(fc: 2h or 3h -> h) is counted in its stored weights (the memory) but not priced (h x 3h multiply-adds per token,
below 1% of a decoder layer's); EAGLE's tree drafts are not modelled (vLLM serves chains).
"""

from __future__ import annotations

from sim.cost_coefficients import CostCoefficients
from sim.cost_model import CostModel
from sim.engine_facts import EngineFacts
from sim.scheduler_output import SchedulerOutput

# vLLM's n-gram lookup is a KMP match of the context's last n tokens over the context, compiled by numba: ~1 ns per
# token compared on a server core (a scan of 4k tokens takes a few microseconds). No public measurement isolates it;
# the live engine measures our own lookup, and the uncertainty of this figure is its order of magnitude.
NGRAM_S_PER_CONTEXT_TOKEN = 1e-9

# The terms a calibration profile holds once drafting was fitted (planner/calibration/draft_fit.py), per method;
# None in a profile: priced as above, from the drafter's facts (or the n-gram estimate) alone
DRAFTER_TERMS, NGRAM_TERMS = ("draft_pass_overhead_s",), ("ngram_overhead_s", "ngram_s_per_context_token")


def fitted_terms(method: str) -> tuple[str, ...]:
    """The drafting terms a calibration fits for a speculative method."""
    return NGRAM_TERMS if method == "ngram" else DRAFTER_TERMS


# A step's drafting as the live engine times it (gpu_engine/speculative.py) and calibrate fits it: its seconds, the
# rows that drafted, the first pass's tokens, (query, key) pairs and context tokens (n-gram: the context tokens it
# scanned, and no pass), and the later passes' mean context tokens.
DRAFT_COLUMNS = ("draft_s", "num_rows", "num_tokens", "attention_pairs", "context_tokens", "later_context_tokens")
# The key of a drafting row in `planner run --out`'s drafting.csv: its step's row in steps.csv (0 = the first)
DRAFT_STEP = "step"


def pass_shape(rows: list[tuple[int, int]]) -> tuple[int, int, int]:
    """(tokens, attention pairs, context tokens) of a pass over rows of (computed, new) tokens, counted as
    SchedulerOutput.add counts a step's."""
    tokens = sum(new for _, new in rows)
    pairs = sum(new * computed + new * (new + 1) // 2 for computed, new in rows)
    return tokens, pairs, sum(computed + new for computed, new in rows)


class DraftCost:
    """One engine's drafting seconds per step."""

    def __init__(self, facts: EngineFacts, coefficients: CostCoefficients | None = None) -> None:
        spec = facts.engine.speculative
        assert spec is not None, "DraftCost is for a speculative engine"
        self.method, self.k = spec.method, spec.num_speculative_tokens
        self.drafter = CostModel(facts.draft, coefficients) if facts.draft is not None else None
        c = coefficients or CostCoefficients()
        # Uncalibrated (None): no fixed cost per pass beyond the drafter's own terms, and the estimate above
        self.pass_overhead_s = c.draft_pass_overhead_s or 0.0
        self.ngram_s_per_token = (
            NGRAM_S_PER_CONTEXT_TOKEN if c.ngram_s_per_context_token is None else c.ngram_s_per_context_token
        )
        self.ngram_overhead_s = c.ngram_overhead_s or 0.0

    @classmethod
    def of(cls, facts: EngineFacts, coefficients: CostCoefficients | None = None) -> DraftCost | None:
        """The engine's drafting cost; None when it does not speculate."""
        return None if facts.engine.speculative is None else cls(facts, coefficients)

    def step_s(self, out: SchedulerOutput) -> float:
        """Seconds the step spends drafting after its forward, on the device (a drafter) or the host (n-gram)."""
        rows = out.num_sampled  # the rows that sampled a token draft the next step's tokens
        if self.drafter is None:  # ngram: a lookup over each sampling row's context
            return self.ngram_s(out.sum_context_tokens) if rows else 0.0
        first = self.first_pass_s(out.num_tokens, out.num_seqs, rows, out.attention_pairs, out.sum_context_tokens)
        if not rows or self.k == 1:
            return first
        # k - 1 more passes, one token per drafting row, each over the rows' contexts
        return first + (self.k - 1) * self.later_pass_s(rows, out.sum_context_tokens)

    def ngram_s(self, context_tokens):
        """The n-gram lookup's host seconds over context_tokens scanned (scalars or arrays)."""
        return self.ngram_s_per_token * context_tokens + self.ngram_overhead_s

    def first_pass_s(self, num_tokens, num_seqs, num_rows, attention_pairs, sum_context_tokens):
        """The drafter's first pass: over the tokens it has not seen, its num_rows rows sampling the first drafts."""
        d = self.drafter
        return d.device_s(num_tokens, num_seqs, num_rows, attention_pairs, sum_context_tokens) + self.pass_overhead_s

    def later_pass_s(self, num_rows, sum_context_tokens):
        """One of the k - 1 later passes: one token per drafting row, each attending over its context."""
        d = self.drafter
        return d.device_s(num_rows, num_rows, num_rows, sum_context_tokens, sum_context_tokens) + self.pass_overhead_s
