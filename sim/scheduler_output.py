"""One step's batch as the scheduler hands it over: its rows and the aggregates the cost model prices it by."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.request import Request


@dataclass(slots=True)  # slots: a step makes one and adds to it per row
class SchedulerOutput:
    """One step's batch, with the aggregates the cost model prices it by."""

    scheduled: list[tuple[Request, int]] = field(default_factory=list)  # (request, num_new_tokens)
    num_preempted: int = 0
    num_prefill_tokens: int = 0
    num_prompt_rows: int = 0  # rows computing prompt tokens (CostCoefficients.per_prompt_row_overhead_s)
    num_decode_requests: int = 0
    num_sampled: int = 0
    num_tokens: int = 0  # tokens computed, static batching's padding included
    num_seqs: int = 0  # rows, static batching's idle members included
    sum_context_tokens: int = 0  # K/V tokens read by attention, summed over rows
    attention_pairs: int = 0  # (query, key) pairs under the causal mask
    tokens_held: int = 0  # distinct tokens stored in the KV cache by running requests after the step
    # False for the steps of a multi-step block after its first (engine.num_scheduler_steps): the host scheduled
    # and prepared them with the first, and they advance their inputs on the device (CostModel.block_step_host_s).
    host_scheduled: bool = True
    num_draft_tokens: int = 0  # speculative decoding: drafted tokens verified (in num_tokens, beside their rows)
    # When the step began, set by whoever runs it: a request's first step is its vLLM scheduled_ts (the end of its
    # queue time, the start of its prefill time: vllm/v1/metrics/stats.py, update_from_finished_request)
    start_s: float | None = None

    def add(self, request: Request, num_new_tokens: int) -> None:
        computed = request.num_computed_tokens
        context = computed + num_new_tokens
        self.scheduled.append((request, num_new_tokens))
        self.num_tokens += num_new_tokens
        self.num_seqs += 1
        self.sum_context_tokens += context
        self.attention_pairs += num_new_tokens * computed + num_new_tokens * (num_new_tokens + 1) // 2
        self.tokens_held += context
        if context >= request.num_tokens:
            self.num_sampled += 1
        if num_new_tokens == 1 and computed >= request.num_prompt_tokens:
            self.num_decode_requests += 1
        elif computed + 1 == request.num_tokens and computed >= request.num_prompt_tokens:
            # A decode row that verifies drafts (speculative decoding, sim/speculation.py): its token and num_new - 1
            # drafted ones, every one attending over the context before it (the pairs above)
            self.num_decode_requests += 1
            self.num_draft_tokens += num_new_tokens - 1
        else:
            self.num_prefill_tokens += num_new_tokens
            self.num_prompt_rows += 1

    def add_decodes(self, num_rows: int, sum_context_tokens: int) -> None:
        """What add() counts for num_rows decode rows (one new token each, sampled) whose contexts after the
        step sum to sum_context_tokens: a decode token attends over its whole context."""
        self.num_tokens += num_rows
        self.num_seqs += num_rows
        self.num_sampled += num_rows
        self.num_decode_requests += num_rows
        self.sum_context_tokens += sum_context_tokens
        self.attention_pairs += sum_context_tokens
        self.tokens_held += sum_context_tokens
