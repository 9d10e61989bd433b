"""A prompt's KV cache moving from a prefill instance to a decode instance: the bytes that move, how long a link
takes for them alone, and how transfers in flight share their links (both executors price transfers here: the
simulator's link (sim/fleet.py) and the live engine's timed copies (gpu_engine/pd_pair.py)).

Bytes: what the decode instance's ranks receive. vLLM's NixlConnector pulls (each decode rank reads its own KV
heads from the prefill ranks that hold them, `NixlConnectorWorker._read_blocks`), so a token costs the decode
engine's KV bytes per token on every rank: K and V of its heads, or multi-head latent attention's latent (one per
rank: every rank holds it whole), in every full-attention layer, and in a sliding-window layer only for the last
`sliding_window` tokens (vLLM's hybrid allocator holds no more). The link: each GPU has its own (an InfiniBand or
RoCE NIC per GPU, NVLink), so a transfer alone moves at the bandwidth per GPU times the GPUs of its narrower end
(min of the two engines' tensor parallel sizes).

Sharing: transfers in flight at one engine split its links evenly; a transfer moves at its solo speed divided by
the larger count of transfers at either of its two engines. Simplified from max-min fairness (a transfer whose
other end is less busy could take more), so it errs slow, never fast. Each transfer also pays the link's fixed
latency once, before it moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.config import KvTransferConfig
from sim.engine_facts import EngineFacts

# A KV transfer's link kinds and the fixed cost each transfer pays on them when the file gives none: the link's own
# one-way latency (RDMA over InfiniBand or RoCE a few microseconds, NVLink and PCIe DMA less, a TCP hop in a data
# centre tens of microseconds), rounded up; the engines' own step granularity is simulated, not added here.
LINK_LATENCY_MS = {"nvlink": 0.01, "infiniband": 0.01, "roce": 0.02, "pcie": 0.01, "tcp": 0.1, "host_memory": 0.0}
# A transfer finishes once what is left of it is below this share of its solo time (float residue of the sums).
DONE_SHARE = 1e-12


def kv_transfer_bytes(decode: EngineFacts, num_tokens: int) -> int:
    """Bytes the decode engine's ranks receive for num_tokens tokens of a prompt's KV (module docstring)."""
    m = decode.model
    sliding = m.num_sliding_layers
    per_rank = decode.kv_bytes_per_token_per_layer * (
        (m.num_hidden_layers - sliding) * num_tokens + sliding * min(num_tokens, m.sliding_window or 0)
    )
    return per_rank * decode.tensor_parallel_size


def link_bytes_per_s(link: KvTransferConfig, prefill: EngineFacts, decode: EngineFacts) -> float:
    """A transfer's speed alone on the link: the bandwidth per GPU (Gb/s -> bytes/s) times the narrower end's GPUs."""
    gpus = min(prefill.tensor_parallel_size, decode.tensor_parallel_size)
    return link.bandwidth_gbit_per_s * 1e9 / 8 * gpus


@dataclass
class SharedLinks:
    """Transfers in flight between engines (ends are any hashable names), each with its solo seconds left.

    `advance(now_s)` moves every transfer on at its current share; `add` and the finishes change the shares. Pure
    bookkeeping: the caller owns the clock (SimPy's, or the live engine's)."""

    now_s: float = 0.0
    # transfer key -> [solo seconds left, solo seconds in all, source end, destination end]
    flows: dict = field(default_factory=dict)
    load: dict = field(default_factory=dict)  # end -> transfers in flight there

    def add(self, key, solo_s: float, source, destination, now_s: float) -> None:
        self.advance(now_s)
        self.flows[key] = [solo_s, solo_s, source, destination]
        for end in (source, destination):
            self.load[end] = self.load.get(end, 0) + 1

    def _rate(self, flow: list) -> float:
        return 1.0 / max(self.load[flow[2]], self.load[flow[3]])

    def advance(self, now_s: float) -> None:
        elapsed = now_s - self.now_s
        if elapsed > 0:
            for flow in self.flows.values():
                flow[0] -= elapsed * self._rate(flow)
        self.now_s = max(self.now_s, now_s)

    def next_finish_s(self) -> float | None:
        """When the first transfer in flight finishes if nothing changes meanwhile (None: none in flight)."""
        if not self.flows:
            return None
        return self.now_s + min(max(flow[0], 0.0) / self._rate(flow) for flow in self.flows.values())

    def pop_finished(self, now_s: float) -> list:
        """The transfers done by now_s (in the order they were added), no longer in flight."""
        self.advance(now_s)
        # done: what is left is float residue, or too little to move the clock on (its finish would be now again)
        done = [
            key
            for key, flow in self.flows.items()
            if flow[0] <= DONE_SHARE * flow[1] or self.now_s + flow[0] / self._rate(flow) <= self.now_s
        ]
        for key in done:
            _, _, source, destination = self.flows.pop(key)
            for end in (source, destination):
                self.load[end] -= 1
        return done


@dataclass
class TransferLog:
    """Every transfer of a run: when it started and ended (seconds) and what it moved."""

    start_s: list[float] = field(default_factory=list)
    end_s: list[float] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    num_bytes: list[int] = field(default_factory=list)

    def add(self, start_s: float, end_s: float, num_tokens: int, num_bytes: int) -> None:
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        self.num_tokens.append(num_tokens)
        self.num_bytes.append(num_bytes)

    def summary(self, link: KvTransferConfig, latency_ms: float) -> dict:
        """summary.json's `kv_transfer`: the link, how many transfers and bytes, their durations (ms)."""
        durations_ms = (np.array(self.end_s) - np.array(self.start_s)) * 1e3
        stats = {
            f"{name}_transfer_ms": float(np.percentile(durations_ms, p)) if len(durations_ms) else None
            for name, p in (("median", 50), ("p90", 90), ("p99", 99))
        }
        return {
            "link": link.link,
            "connector": link.connector,
            "bandwidth_gbit_per_s": link.bandwidth_gbit_per_s,
            "latency_ms": latency_ms,
            "layerwise": link.layerwise,
            "num_transfers": len(self.start_s),
            "tokens_moved": int(sum(self.num_tokens)),
            "bytes_moved": int(sum(self.num_bytes)),
            "mean_transfer_ms": float(durations_ms.mean()) if len(durations_ms) else None,
            **stats,
        }
