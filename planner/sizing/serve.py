"""The `vllm serve` command line of a candidate: the flags vLLM reads for the settings the simulator ran.

Flag names as vLLM's EngineArgs (`vllm serve --help`); booleans as its `--flag` / `--no-flag` pairs.
"""

from __future__ import annotations

import json

from planner.sizing.dp_serve import data_parallel_flags
from sim.config import Scenario, SpeculativeConfig


def vllm_serve_command(s: Scenario) -> str:
    """The command line, or a comment saying why there is none: the static scheduler and contiguous KV are
    baselines the simulator runs and vLLM does not, and a model described inline has no checkpoint to load."""
    e = s.engine
    baselines = [
        what
        for what, used in (
            ("the static scheduler", e.scheduler == "static"),
            ("contiguous KV", e.kv_cache == "contiguous"),
        )
        if used
    ]
    if baselines:
        return f"# no vllm serve line: {' and '.join(baselines)} (a baseline the simulator runs) cannot be set in vLLM"
    if e.num_scheduler_steps > 1:
        return (
            f"# no vllm serve line: engine.num_scheduler_steps {e.num_scheduler_steps} is vLLM V0's multi-step"
            " scheduling (--num-scheduler-steps, vLLM 0.6-0.7), which today's vLLM has no flag for"
        )
    if s.model.checkpoint is None:
        return (
            f"# no vllm serve line: the model {s.model.name} has no checkpoint to load (give model as a catalog name"
            " or the local folder of an HF model)"
        )
    parts = [
        f"vllm serve {s.model.checkpoint}",
        f"--dtype {s.dtype}",
        f"--tensor-parallel-size {s.hardware.tensor_parallel_size}",
        *data_parallel_flags(s),
        f"--max-model-len {s.max_model_len}",
        f"--max-num-seqs {e.max_num_seqs}",
        f"--max-num-batched-tokens {e.max_num_batched_tokens}",
        f"--gpu-memory-utilization {e.gpu_memory_utilization:g}",
        f"--block-size {e.block_size}",
        "--enable-chunked-prefill" if e.enable_chunked_prefill else "--no-enable-chunked-prefill",
        "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching",
        f"--kv-cache-dtype {e.kv_cache_dtype}",
    ]
    if not e.scheduler_reserve_full_isl:  # the older admission on a prompt's first chunk
        parts.append("--no-scheduler-reserve-full-isl")
    if e.enforce_eager:  # no CUDA graphs, no async scheduling: the serial steps the candidate was simulated with
        parts.append("--enforce-eager")
    if e.num_gpu_blocks_override is not None:
        parts.append(f"--num-gpu-blocks-override {e.num_gpu_blocks_override}")
    if s.hardware.expert_parallel:  # experts placed whole across the tensor-parallel (and data-parallel) ranks
        parts.append("--enable-expert-parallel")
    if s.model.model_type == "qwen":  # first-generation Qwen ships its modelling code in the repository
        parts.append("--trust-remote-code")
    if e.speculative is not None:
        parts.append(f"--speculative-config '{speculative_config_json(e.speculative)}'")
    if e.kv_offload is not None:  # vLLM's size is the engine's, split over its ranks (vllm/config/kv_offloading)
        total_gib = e.kv_offload.size_gib * s.hardware.tensor_parallel_size
        parts += ["--kv-offloading-backend native", f"--kv-offloading-size {total_gib:g}"]
    return " ".join(parts)


def speculative_config_json(spec: SpeculativeConfig) -> str:
    """vLLM's --speculative-config for the simulated drafter: method, k and the drafter's checkpoint (an inline head
    stands by its name: name it as its Hugging Face repository). The acceptance settings are the scenario's
    description of the data, not a setting of the server: left out (vLLM verifies with its strict sampler)."""
    config: dict = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens}
    if spec.model is not None:
        config["model"] = spec.model.checkpoint or spec.model.name
    if spec.method == "ngram":
        for key in ("prompt_lookup_max", "prompt_lookup_min"):
            if getattr(spec, key) is not None:
                config[key] = getattr(spec, key)
    return json.dumps(config)
