"""Launch configuration of the paged-attention kernels (kernels/paged_attention.py): the decode and prefill
LaunchConfig for a dtype, head_dim and target arch, and how many KV splits a decode batch gets.
"""

import functools
import os
from dataclasses import dataclass

import torch
import triton

MAX_SPLITS = 16  # KV splits of a decode batch, at most: the merge kernel's compile-time width


@dataclass(frozen=True)
class LaunchConfig:
    block_m: int  # query rows per program (tokens x the query heads of one KV head), at least
    tile_n: int  # context tokens per KV-loop iteration
    num_warps: int
    num_stages: int


# Untuned first guesses: python -m planner_kernels.bench --sweep times the decode alternatives on a GPU.
DECODE_CONFIG = LaunchConfig(block_m=16, tile_n=64, num_warps=4, num_stages=3)
PREFILL_CONFIG = LaunchConfig(block_m=64, tile_n=64, num_warps=4, num_stages=2)
INTERPRETER_TILE_N = 16  # under TRITON_INTERPRET: small tiles keep the CPU tests quick
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"  # read once, as triton.jit reads it at decoration


@functools.cache
def _num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


MIN_TILES_TO_SPLIT = 2  # a context of one tile has nothing to share out


def choose_num_splits(num_programs: int, max_tiles: int, num_sms: int) -> int:
    """KV splits for a decode batch of num_programs (sequences x KV heads) programs whose longest context
    spans max_tiles tiles: split only when the programs leave SMs idle and the context spans at least
    MIN_TILES_TO_SPLIT tiles; then enough splits to give every SM a program, at most one split per tile
    and MAX_SPLITS (flash-decoding, as vLLM's unified attention splits its 3D decode path)."""
    if num_programs >= num_sms or max_tiles < MIN_TILES_TO_SPLIT:
        return 1
    return min(triton.cdiv(num_sms, num_programs), max_tiles, MAX_SPLITS)


def _choose_num_splits(
    query, k_cache, block_tables, num_seqs, decode: bool, tile_n: int, sliding_window: int = 0
) -> int:
    """choose_num_splits for a launch: CUDA decode batches only. The block table's width bounds the context,
    so there is no host sync on seq_lens (and a CUDA graph's padded table gives one fixed choice); a window
    bounds it too (its keys span at most cdiv(window, tile_n) + 1 tiles)."""
    if not decode or query.device.type != "cuda":
        return 1
    max_tiles = triton.cdiv(block_tables.shape[1] * k_cache.shape[1], tile_n)
    if sliding_window:
        max_tiles = min(max_tiles, triton.cdiv(sliding_window, tile_n) + 1)
    return choose_num_splits(num_seqs * k_cache.shape[2], max_tiles, _num_sms(query.device))


def target_arch(device: torch.device) -> int:
    """The compute capability the kernels compile for (90 for sm_90): the CUDA device's or, for tensors
    elsewhere (the ahead-of-time compile check's meta tensors), that of Triton's active driver."""
    if device.type == "cuda":
        return _cuda_arch(device)
    return triton.runtime.driver.active.get_current_target().arch


@functools.cache
def _cuda_arch(device: torch.device) -> int:
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def launch_config(decode: bool, dtype: torch.dtype, head_dim: int, arch: int) -> LaunchConfig:
    """The decode or prefill config, changed where `python -m gpu_engine.compile_check` found register
    spills with it (ptxas, per thread): bf16 prefill at head_dim 256 (BLOCK_M 64: 40 B on sm_90), prefill
    before sm_90 (without wgmma, 4 warps hold the 64 x 128 fp32 accumulator in 255 registers and spill
    32-64 B), fp32 prefill (up to 70 KB on sm_90 at BLOCK_M 64; none at 32 rows and 8 warps), and decode at
    head_dim < 64 (8 B on sm_90 at TILE_N 64)."""
    config = DECODE_CONFIG if decode else PREFILL_CONFIG
    block_m, tile_n, num_warps = config.block_m, config.tile_n, config.num_warps
    if head_dim > 128:
        block_m, tile_n = min(block_m, 32), 32
    elif not decode and dtype == torch.float32:
        block_m, num_warps = 32, 8
    elif not decode and arch < 90:
        num_warps = 8
    if decode and head_dim < 64:
        tile_n = 32
    return LaunchConfig(block_m, tile_n, num_warps, config.num_stages)


def _config(decode: bool, dtype: torch.dtype, head_dim: int, device: torch.device) -> LaunchConfig:
    if INTERPRETING:  # the interpreter runs a program per tile in Python: small tiles keep the CPU tests quick
        config = DECODE_CONFIG if decode else PREFILL_CONFIG
        return LaunchConfig(config.block_m, INTERPRETER_TILE_N, config.num_warps, config.num_stages)
    return launch_config(decode, dtype, head_dim, target_arch(device))
