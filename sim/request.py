"""A request's state as the scheduler sees it (vLLM v1's `Request`, reduced to what scheduling needs).

There is no prefill or decode phase: `num_computed_tokens` catches up with `num_tokens`, which grows by
one each time a token is sampled. Token ids exist only in the live engine; the simulator leaves
`prompt_token_ids` as None and counts outputs in `num_output_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.acceptance import AcceptanceDraws


class Status(Enum):
    WAITING = "waiting"
    # vLLM's RequestStatus.WAITING_FOR_REMOTE_KVS: a decode instance holds blocks for the request's prompt while
    # its KV is pulled from the prefill instance (sim/fleet.py prices the pull); in the queue, skipped until then
    WAITING_FOR_REMOTE_KVS = "waiting_for_remote_kvs"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False, slots=True)  # slots: the scheduler reads these fields per request per step
class Request:
    """One request: its workload (prompt, reply length, prefix group) and its scheduling state."""

    request_id: int
    arrival_s: float
    num_prompt_tokens: int
    max_output_tokens: int  # forced output length: EOS is ignored, so this is exactly the reply's length
    prompt_token_ids: list[int] | None = None  # live engine only
    # Prefix caching: the first `prefix_tokens` tokens are shared by every request of `prefix_group`.
    prefix_group: int = -1
    prefix_tokens: int = 0
    # Prefix identity from a trace (sim/trace_blocks.py): the prompt's block ids, each naming trace_block_tokens
    # tokens; requests with the same id hold the same tokens there (and before: the ids are chained).
    trace_block_ids: tuple[int, ...] = ()
    trace_block_tokens: int = 0
    # Disaggregated serving, as vLLM's kv_transfer_params: the prefill instance's copy (one token) keeps its blocks
    # once finished, until the decode instance has pulled them; the decode instance's copy pulls its prompt's KV
    # before it is scheduled (cleared once the pull is under way: one transfer per request).
    do_remote_decode: bool = False
    do_remote_prefill: bool = False

    status: Status = Status.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    output_token_ids: list[int] = field(default_factory=list)  # live engine only
    block_ids: list[int] = field(default_factory=list)  # block table: logical block i -> physical id
    num_cached_blocks: int = 0  # leading blocks already registered in the prefix cache
    block_hashes: list[int] = field(default_factory=list)  # chained hashes of the full blocks
    num_preemptions: int = 0
    admission_order: int = 0  # when it last joined the running requests (the scheduler's count): their order
    first_token_s: float | None = None
    # With a host KV tier (sim/host_tier.py): when it was first scheduled, and the seconds it waited for its loads
    first_scheduled_s: float | None = None
    host_load_s: float = 0.0
    last_token_s: float | None = None  # inter-token gaps go to the metrics as they happen, not kept here
    finished_s: float | None = None
    # Speculative decoding: the request's seeded acceptance draws (sim/acceptance.py), from its first decode step
    # to its finish; None otherwise.
    spec_draws: AcceptanceDraws | None = None

    @property
    def num_tokens(self) -> int:
        """Tokens whose K/V must eventually be computed: the prompt plus every sampled token."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def token_ids(self, start: int, stop: int) -> list[int]:
        """Token ids [start, stop) of prompt + output (live engine only)."""
        assert self.prompt_token_ids is not None, "token ids exist only in the live engine"
        prompt, num_prompt = self.prompt_token_ids, len(self.prompt_token_ids)
        if stop <= num_prompt:
            return prompt[start:stop]
        if start >= num_prompt:  # decode: no copy of the whole context per step
            return self.output_token_ids[start - num_prompt : stop - num_prompt]
        return prompt[start:] + self.output_token_ids[: stop - num_prompt]

    def block_content_key(self, block_index: int, block_size: int) -> tuple:
        """What identifies a full block's tokens, for the prefix-cache hash.

        Live: the token ids themselves. Simulated: a block inside the shared prefix is the same for the
        whole group; a prompt block inside the trace's block ids is named by the id of the trace block holding
        its last token (chained ids: that one names every token before it too); any other block is this
        request's own.
        """
        start, stop = block_index * block_size, (block_index + 1) * block_size
        if self.prompt_token_ids is not None:
            return tuple(self.token_ids(start, stop))
        if self.trace_block_ids:
            return self._trace_block_key(block_index, block_size)
        if stop <= self.prefix_tokens:
            return (0, self.prefix_group, block_index)  # ints hash the same in every process
        return (1, self.request_id, block_index)

    def block_content_keys(self, first: int, stop: int, block_size: int) -> list[tuple]:
        """block_content_key of blocks first .. stop - 1."""
        if self.prompt_token_ids is not None or self.trace_block_ids:
            return [self.block_content_key(i, block_size) for i in range(first, stop)]
        in_prefix = min(max(self.prefix_tokens // block_size, first), stop)  # blocks below: inside the prefix
        group, own = self.prefix_group, self.request_id
        return [(0, group, i) for i in range(first, in_prefix)] + [(1, own, i) for i in range(in_prefix, stop)]

    def num_shareable_blocks(self, block_size: int) -> int | None:
        """Leading full blocks whose content another request may have (None: any block).

        Live: token ids can repeat across requests, so any block. Simulated: only the blocks inside the
        shared prefix; a block keyed by this request's own id can be hit by nobody else (only by this
        request itself, after a preemption).
        """
        if self.prompt_token_ids is not None:
            return None
        if self.trace_block_ids:
            return self._num_trace_tokens() // block_size
        return self.prefix_tokens // block_size

    def _num_trace_tokens(self) -> int:
        """Leading prompt tokens that the trace's block ids name."""
        return min(self.num_prompt_tokens, len(self.trace_block_ids) * self.trace_block_tokens)

    def _trace_block_key(self, block_index: int, block_size: int) -> tuple:
        """An engine block's key from the trace's ids. The engine's block_size (16) need not divide the trace's
        block (Mooncake: 512): a block straddling two trace blocks is named by the second, whose id implies the
        first. Blocks reaching past the tokens the ids name (the reply, a prompt clipped longer) are its own."""
        last_token = (block_index + 1) * block_size - 1
        if last_token >= self._num_trace_tokens():
            return (1, self.request_id, block_index)
        return (2, self.trace_block_ids[last_token // self.trace_block_tokens], block_index)
