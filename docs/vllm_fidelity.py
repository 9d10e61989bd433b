"""Recompute the memory model's num_gpu_blocks for each public vLLM start-up log listed here, and write
docs/vllm-fidelity.md (the table of logs, their settings, vLLM's figures, ours and our error).

    python docs/vllm_fidelity.py            # rewrite docs/vllm-fidelity.md
    python docs/vllm_fidelity.py --check    # exit 1 if docs/vllm-fidelity.md is out of date

Each log's settings are written as a scenario mapping, validated like a scenario file, so unset keys take
the values `vllm serve` would (sim/defaults.py). vLLM's num_gpu_blocks is "GPU KV cache size" / block_size
when the log prints it, else "Available KV cache memory" / block bytes (that figure is rounded to 0.01 GiB).
`comparable` says whether the log's vLLM accounts memory as the one this model follows (v1, v0.21+); the
others are listed so the difference is on record, and their error does not count against the target.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from planner.scenario import validate_mapping
from sim.memory import GIB, memory_breakdown

OUTPUT = REPO / "docs" / "vllm-fidelity.md"
TARGET_ERROR = 0.02  # issue 9: num_gpu_blocks within 2% of vLLM's for every log whose settings are known

# A 24 GB GDDR6 board; torch's total is taken to be the RTX 4090's (same 24564 MiB in nvidia-smi; catalog).
RTX_A5000 = {"name": "rtx-a5000", "memory_bytes": 25_253_904_384, "bf16_tflops": 111.1, "memory_bandwidth_gbps": 768}
# The total that log printed ("total_gpu_memory 79.22GiB"), not the catalog's 79.11 GiB.
H100_AS_LOGGED = {
    "name": "h100-sxm",
    "memory_bytes": int(79.22 * GIB),
    "bf16_tflops": 989,
    "memory_bandwidth_gbps": 3350,
}

LOGS = [
    {
        "source": "LMCache/LMCache#3430 (2026-05-28)",
        "url": "https://github.com/LMCache/LMCache/issues/3430",
        "vllm": "0.21.0",
        "comparable": True,
        "settings": "Qwen3-8B bf16, 1x RTX A5000 24 GB, gpu_memory_utilization 0.9764 (as logged), max_model_len"
        " 16384, CUDA graphs on (PIECEWISE=51, FULL=35: the defaults for max_num_seqs 256), other keys default",
        "scenario": {
            "model": "qwen3-8b",
            "hardware": {"gpu": RTX_A5000},
            "engine": {"gpu_memory_utilization": 0.9764, "max_model_len": 16384},
        },
        "vllm_num_gpu_blocks": 46_368 // 16,  # "GPU KV cache size: 46,368 tokens"
        "vllm_figures": "Estimated CUDA graph memory 0.52 GiB; Available KV cache memory 6.37 GiB;"
        " GPU KV cache size 46,368 tokens",
        "notes": "The CUDA-graph per-layer cost (sim/memory.py) is fitted to this log's 0.52 GiB, so only the"
        " rest of the model (weights, activations, sampler, non-torch, blocks) is tested independently here."
        " The A5000's torch total is assumed equal to the RTX 4090's.",
    },
    {
        "source": "vllm-project/vllm#10511 (2024-12-13)",
        "url": "https://github.com/vllm-project/vllm/pull/10511",
        "vllm": "0.6.5 (v0 engine)",
        "comparable": False,
        "settings": "Llama-3-8B bf16 (llama-3.1-8b's architecture), 1x H100 (79.22 GiB logged), gpu_memory_utilization"
        " 0.9, max_model_len 8192; v0's budget without chunked prefill: 8192 tokens, 256 sequences; no graph"
        " estimate in that version (enforce_eager: true reproduces its accounting)",
        "scenario": {
            "model": "llama-3.1-8b",
            "hardware": {"gpu": H100_AS_LOGGED},
            "engine": {
                "max_model_len": 8192,
                "max_num_batched_tokens": 8192,
                "max_num_seqs": 256,
                "enforce_eager": True,
            },
        },
        "vllm_num_gpu_blocks": int(53.29 * GIB) // (2 << 20),  # "available_kv_cache_memory 53.29GiB", 2 MiB blocks
        "vllm_figures": "weights 14.96 GiB; non_torch_memory 1.79 GiB; activation peak 1.26 GiB;"
        " available_kv_cache_memory 53.29 GiB",
        "notes": "v0.6.5 counted the CUDA context and cuBLAS workspaces in non-torch memory (1.79 GiB against"
        " the 0.2 GiB v1 logs show, the context being created before v1's baseline): most of our error.",
    },
]


def evaluate(log: dict) -> dict:
    data = {"workload": {"arrival": {"rate": 1.0}}, **log["scenario"]}
    scenario = validate_mapping(data, log["source"], REPO)
    mem = memory_breakdown(scenario)
    error = mem.num_gpu_blocks / log["vllm_num_gpu_blocks"] - 1
    return {
        "ours": mem.num_gpu_blocks,
        "error": error,
        "cuda_graph_gib": mem.cuda_graph_bytes / GIB,
        "kv_gib": mem.kv_cache_bytes / GIB,
        "max_num_seqs": scenario.engine.max_num_seqs,
        "max_num_batched_tokens": scenario.engine.max_num_batched_tokens,
    }


FOLLOWED = [  # (vLLM function, file, what we follow, our module)
    ("EngineArgs.get_batch_defaults, _set_default_max_num_seqs_and_batched_tokens_args", "vllm/engine/arg_utils.py",
     "unset max_num_batched_tokens / max_num_seqs as `vllm serve` picks them on the GPU", "sim/defaults.py"),
    ("Scheduler.schedule", "vllm/v1/core/sched/scheduler.py",
     ("running first, then waiting FCFS; recompute preemption from the tail; chunked prefill off = whole"
      " prompts into what is left of the budget, in mixed steps"), "sim/scheduler.py"),
    ("KVCacheManager.get_computed_blocks, allocate_slots", "vllm/v1/core/kv_cache_manager.py",
     "prefix hits up to num_tokens - 1; blocks cached at allocation, capped at num_tokens", "sim/kv_manager.py"),
    ("BlockPool", "vllm/v1/core/block_pool.py",
     "the null block (block 0); LRU free queue keeping cached content; tail-first freeing", "sim/block_pool.py"),
    ("Worker.determine_available_memory, GPUModelRunner.profile_cudagraph_memory",
     "vllm/v1/worker/gpu_worker.py, gpu_model_runner.py",
     "requested memory minus weights, activation peak, non-torch growth and the CUDA-graph estimate", "sim/memory.py"),
]  # fmt: skip


def render() -> str:
    lines = [
        "# What the simulator follows in vLLM, and the memory model against vLLM's start-up logs",
        "",
        "The serving model follows vLLM v1 as released in v0.21 and later (read in vLLM's main branch source,",
        "late 2026; v1 is the only engine since 0.11 and turns prefix caching on by default; the CUDA-graph memory",
        "estimate subtracted by default since 0.21):",
        "",
        "| vLLM function | file | what we follow | ours |",
        "|---|---|---|---|",
        *(f"| `{fn}` | `{file}` | {what} | `{ours}` |" for fn, file, what, ours in FOLLOWED),
        "",
        "## Start-up logs",
        "",
        "Generated by `python docs/vllm_fidelity.py` (tests/test_vllm_fidelity.py keeps it current and checks",
        f"the target: `num_gpu_blocks` within {TARGET_ERROR:.0%} of vLLM's for every comparable log whose settings",
        "are known). The model follows vLLM v1's `Worker.determine_available_memory` as of v0.21 and later",
        "(CUDA-graph memory estimated and subtracted by default); see sim/memory.py.",
        "",
        "| log | vLLM | settings | vLLM's figures | vLLM blocks | ours | error | counts |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for log in LOGS:
        r = evaluate(log)
        lines.append(
            f"| [{log['source']}]({log['url']}) | {log['vllm']} | {log['settings']} | {log['vllm_figures']} |"
            f" {log['vllm_num_gpu_blocks']:,} | {r['ours']:,} | {r['error']:+.2%} |"
            f" {'yes' if log['comparable'] else 'no: other accounting'} |"
        )
    lines += ["", "Notes:", ""]
    for log in LOGS:
        r = evaluate(log)
        lines.append(
            f"- {log['source']}: {log['notes']} Ours: {r['kv_gib']:.2f} GiB for KV, CUDA graphs"
            f" {r['cuda_graph_gib']:.2f} GiB, max_num_seqs {r['max_num_seqs']}, max_num_batched_tokens"
            f" {r['max_num_batched_tokens']}."
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    args = parser.parse_args()
    page = render()
    if args.check:
        if OUTPUT.read_text() != page:
            print(f"{OUTPUT} is out of date: run python docs/vllm_fidelity.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(page)
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
