"""Start-up memory profiling: how many KV blocks fit, found as vLLM v1 finds it (gpu_worker.determine_available_memory).

A dummy step of max_num_batched_tokens prompt tokens, spread over min(max_num_seqs, tokens) sequences that all
sample, runs through the real model and sampler. What it allocates at its peak is the activation memory; the
weights are the model's tensor bytes; the rest of gpu_memory_utilization x total memory becomes KV blocks:
    num_gpu_blocks = (total * utilization - weights - activations - non_torch) // block_bytes

On CUDA the peak is torch.cuda.max_memory_allocated() and non-torch memory is the growth of (used - reserved)
since the runner was created. On CPU there is no allocator peak to read, so the peak is measured by
`PeakTensorBytes` (bytes of the tensors the run creates that are alive at once, checked after every aten op;
an op's internal scratch is not seen) and non-torch memory is 0; the total comes from the scenario's GPU.
"""

from __future__ import annotations

from math import ceil

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from gpu_engine.runner import ModelRunner, allocate_kv_caches, build_batch, kv_block_bytes, non_torch_device_bytes
from sim.request import Request


class PeakTensorBytes(TorchDispatchMode):
    """CPU stand-in for max_memory_allocated: peak bytes of live tensor storages created under the mode."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}  # storage data_ptr -> (weak ref, nbytes)
        self.current_bytes = self.peak_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._forget_freed()
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in inputs and ptr not in self.live:  # views and in-place results are not new memory
                self.live[ptr] = (StorageWeakRef(storage), storage.nbytes())
                self.current_bytes += storage.nbytes()
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        return out

    def _forget_freed(self) -> None:
        for ptr, (ref, nbytes) in list(self.live.items()):
            if ref.expired():
                del self.live[ptr]
                self.current_bytes -= nbytes


def dummy_requests(num_tokens: int, num_seqs: int, block_size: int) -> list[tuple[Request, int]]:
    """num_seqs whole prompts totalling num_tokens tokens (lengths differ by at most one), on blocks 0, 1, ..."""
    lengths = [num_tokens // num_seqs + (i < num_tokens % num_seqs) for i in range(num_seqs)]
    scheduled, next_block = [], 0
    for i, length in enumerate(lengths):
        num_blocks = ceil(length / block_size)
        request = Request(i, 0.0, length, 1, prompt_token_ids=[0] * length)
        request.block_ids = list(range(next_block, next_block + num_blocks))
        next_block += num_blocks
        scheduled.append((request, length))
    return scheduled


@torch.inference_mode()
def profile_num_blocks(
    runner: ModelRunner,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    gpu_memory_utilization: float,
    total_memory_bytes: int | None = None,  # None: the device's own (CUDA only); required on CPU
) -> dict[str, int]:
    """The memory breakdown in bytes and num_gpu_blocks. Run before the runner's KV cache is allocated."""
    if runner.kv_caches:
        raise ValueError("profile before allocating the KV cache: its blocks would count as activations")
    device = runner.device
    if total_memory_bytes is None:
        if device.type != "cuda":
            raise ValueError("on CPU pass total_memory_bytes (the scenario's GPU memory_bytes)")
        total_memory_bytes = torch.cuda.mem_get_info(device)[1]
    scheduled = dummy_requests(max_num_batched_tokens, min(max_num_seqs, max_num_batched_tokens), runner.block_size)
    activation_bytes = _activation_bytes(runner, scheduled)
    non_torch_bytes = max(0, non_torch_device_bytes(device) - runner.memory_at_start)
    model = runner.model
    weights_bytes = sum(t.nbytes for t in (*model.parameters(), *model.buffers()))
    block_bytes = kv_block_bytes(runner.spec, runner.block_size, runner.dtype)
    usable_bytes = int(total_memory_bytes * gpu_memory_utilization)
    kv_cache_bytes = usable_bytes - weights_bytes - activation_bytes - non_torch_bytes
    return {
        "total_bytes": total_memory_bytes,
        "usable_bytes": usable_bytes,
        "weights_bytes": weights_bytes,
        "activation_bytes": activation_bytes,
        "non_torch_bytes": non_torch_bytes,
        "kv_cache_bytes": kv_cache_bytes,
        "block_bytes": block_bytes,
        "num_gpu_blocks": max(0, kv_cache_bytes) // block_bytes,
    }


def _activation_bytes(runner: ModelRunner, scheduled: list[tuple[Request, int]]) -> int:
    """Peak bytes the step allocates beyond its inputs and the small KV cache it runs on."""
    device = runner.device
    num_blocks = sum(len(r.block_ids) for r, _ in scheduled)
    kv_caches = allocate_kv_caches(runner.spec, num_blocks, runner.block_size, runner.dtype, device)
    batch = build_batch(scheduled, runner.block_size, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        runner.run(batch, kv_caches)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with PeakTensorBytes() as tracker:
        runner.run(batch, kv_caches)
    return tracker.peak_bytes
