"""The development set: 207 published serving measurements (vLLM, SGLang, TensorRT-LLM on A100, H100, H200 and
MI300X; `planner/calibrations/measurements/`, each with its source and caveats in SOURCES.md there), each
turned into the scenario it describes and simulated with the coefficients `calibration: auto` would give.
They are compared against, never fitted to: no coefficient is tuned to a point.

What each point becomes: its GPU and model from the catalog (the FP8 checkpoints as the catalog model with fp8
weights), its tensor parallel degree, its lengths (fixed for random/synthetic sets; ShareGPT as the
lognormal lengths of scenarios/h100_llama31_8b_sharegpt_like.yaml, an approximation the table says), its
arrivals (Poisson at the rate, a closed loop of `max_concurrency` users, or every request at t = 0 as a closed
loop of as many users as requests), and the engine's settings it states. vLLM before 0.8 (the V0 engine)
runs its host work in series with the GPU's (`engine.async_scheduling: false`), with V0's defaults: 256
sequences, and whole prompts without chunked prefill (V0 chunked only past 32k tokens of context, and never
for DeepSeek's MLA) in a budget of max(max_model_len, 2048) tokens; every other point runs
today's vLLM defaults, SGLang and TensorRT-LLM included: the planner models vLLM, and how far other engines
differ is what their rows show. Runs of many requests are simulated on fewer: three rounds of a closed
loop's users (at least MIN_REQUESTS), at most MAX_BURST of a burst at t = 0 (a batch of 512 running at once,
where an engine configured for more would run more: pessimistic there, never optimistic), which keeps throughput and latencies at steady state while the whole set
runs in a few minutes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cache
from pathlib import Path

from planner.calibration.shipped import PROFILE_DIR

POINTS_PATH = PROFILE_DIR / "measurements" / "points.jsonl"
MIN_REQUESTS = 200
ROUNDS = 3  # a closed loop's users each send this many requests
MAX_BURST = 512
V0_MAX_NUM_SEQS = 256  # vLLM V0's default max_num_seqs (EngineArgs, 0.6-0.7)
V0_MIN_BATCHED_TOKENS = 2048  # V0 without chunked prefill: max(max_model_len, 2048) tokens a step

GPUS = {
    "A100-80GB (form factor not stated)": "a100-80gb",
    "H100-80GB (form factor not stated)": "h100-sxm",
    "H100-SXM-80GB": "h100-sxm",
    "H200-SXM-141GB": "h200",
    "H200-SXM5-141GB": "h200",
    "MI300X-192GB": "mi300x",
}
FP8 = {"quant_method": "fp8"}  # NVIDIA ModelOpt checkpoints: per-tensor fp8 weights
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b", None),
    "meta-llama/Llama-3.1-70B-Instruct": ("llama-3.1-70b", None),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("llama-3.1-8b", FP8),
    "nvidia/Llama-3.3-70B-Instruct-FP8": ("llama-3.3-70b", FP8),
    "nvidia/Qwen3-235B-A22B-FP8": ("qwen3-235b-a22b", {"quant_method": "fp8", "weight_block_size": [128, 128]}),
    "deepseek-ai/DeepSeek-R1": ("deepseek-v3", None),  # DeepSeek-V3's architecture and fp8 checkpoint format
    "openai/gpt-oss-120b": ("gpt-oss-120b", None),
}
# The figures compared, published key -> the simulator's summary key (vLLM bench serve's names).
METRICS = {
    "output_throughput_tps": "output_throughput",
    "ttft_ms_mean": "mean_ttft_ms",
    "ttft_ms_median": "median_ttft_ms",
    "tpot_ms_mean": "mean_tpot_ms",
    "tpot_ms_median": "median_tpot_ms",
    "e2e_ms_mean": "mean_e2el_ms",
    "e2e_ms_median": "median_e2el_ms",
}
SHAREGPT_PROMPT = {"dist": "lognormal", "mean": 230, "std": 300, "max": 4096}
SHAREGPT_OUTPUT = {"dist": "lognormal", "mean": 200, "std": 220, "max": 2048}


@cache
def load_points(path: Path = POINTS_PATH) -> tuple[dict, ...]:
    with path.open(encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def vendor(point: dict) -> str:
    return "amd" if point["gpu"].startswith("MI") else "nvidia"


def version_class(point: dict) -> str:
    """vllm-v0 (before 0.8: the V0 engine, host work in series with the GPU's), vllm-v1, or the other engine."""
    if point["engine"] != "vllm":
        return point["engine"]
    major, minor = (int(x) for x in point["engine_version"].split(".")[:2])
    return "vllm-v0" if (major, minor) < (0, 8) else "vllm-v1"


def _num(point: dict, key: str) -> float | None:
    value = point.get(key)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def scenario_mapping(point: dict) -> tuple[dict | None, str]:
    """The scenario a point describes (a mapping for planner.scenario.load.validate_mapping, with `quantization`
    apart: the catalog model's quantization_config), or None and why it cannot be simulated."""
    gpu = GPUS.get(point["gpu"])
    model, quantization = MODELS.get(point["model"], (None, None))
    if gpu is None or model is None:
        return None, f"no catalog entry for {point['model'] if model is None else point['gpu']}"
    requests = int(point.get("num_requests") or 0)
    if requests <= 0:
        return None, "no request count"
    if "sharegpt" in (point.get("dataset") or "").lower():
        prompt, output = dict(SHAREGPT_PROMPT), dict(SHAREGPT_OUTPUT)
        lengths = "ShareGPT as lognormal lengths"
    else:
        inp = _num(point, "input_len") or _num(point, "input_len_mean")
        out = _num(point, "output_len") or _num(point, "output_len_mean")
        if not inp or not out:
            return None, "lengths not stated"
        prompt, output = {"dist": "fixed", "value": round(inp)}, {"dist": "fixed", "value": round(out)}
        lengths = "fixed"
    shared = None
    if (point.get("dataset") or "").startswith("generated-shared-prefix"):
        shared = {"tokens": 2000, "group_size": 50}  # 10 groups x 50 prompts, a 2000-token system prompt each
        prompt = {"dist": "fixed", "value": 3200}
        lengths = "shared 2000-token prefix per 50 prompts"
    rate = _num(point, "request_rate")
    concurrency = point.get("max_concurrency")
    if concurrency is None and "closed loop" in (point.get("arrival") or ""):
        concurrency = _concurrency_from_id(point["id"])
    if rate is not None and not concurrency:
        simulated = min(requests, MIN_REQUESTS)
        arrival = {"process": "poisson", "rate": rate}
    elif concurrency:
        simulated = min(requests, max(MIN_REQUESTS, ROUNDS * int(concurrency)))
        arrival = {"process": "closed", "concurrency": int(concurrency)}
    else:  # every request at t = 0: as many users as requests
        simulated = min(requests, MAX_BURST)
        arrival = {"process": "closed", "concurrency": simulated}
    max_len = int(prompt.get("value") or prompt.get("max")) + int(output.get("value") or output.get("max"))
    flags = _flags(point.get("other_engine_flags") or "")
    engine: dict = {"max_model_len": int(point.get("max_model_len") or flags.get("max_model_len") or max_len)}
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if point.get(key) or flags.get(key):
            engine[key] = int(point.get(key) or flags[key])
    if point.get("prefix_caching") is False:
        engine["enable_prefix_caching"] = False
    if version_class(point) == "vllm-v0":
        engine["async_scheduling"] = False
        engine.setdefault("max_num_seqs", V0_MAX_NUM_SEQS)
        engine["enable_chunked_prefill"] = False
        engine.setdefault("max_num_batched_tokens", max(engine["max_model_len"], V0_MIN_BATCHED_TOKENS))
    workload = {"num_requests": simulated, "seed": 0, "arrival": arrival, "prompt_tokens": prompt,
                "output_tokens": output}  # fmt: skip
    if shared:
        workload["shared_prefix"] = shared
    hardware = {"gpu": gpu, "tensor_parallel_size": int(point.get("tp") or 1)}
    mapping = {"model": model, "dtype": "bfloat16", "hardware": hardware, "engine": engine, "workload": workload}
    return mapping | {"quantization": quantization}, lengths


def _flags(text: str) -> dict[str, int]:
    """The engine's limits a launch command states (`--max-model-len 32768`, `--max_model_len=4096`)."""
    import re

    out = {}
    for key in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
        found = re.search(r"--" + key.replace("_", "[-_]") + r"[= ](\d+)", text)
        if found:
            out[key] = int(found.group(1))
    return out


def _concurrency_from_id(point_id: str) -> int | None:
    """dstack's online rows name their concurrency in the id (`...-c64-o800-1`)."""
    for part in point_id.split("-"):
        if part[:1] == "c" and part[1:].isdigit():
            return int(part[1:])
    return None


def build_scenario(mapping: dict):
    from planner.catalog import _catalog_entry, model_spec_from_hf_config
    from planner.scenario.load import validate_mapping

    mapping = dict(mapping)
    quantization = mapping.pop("quantization", None)
    scenario = validate_mapping(mapping, "<development set point>", Path("."))
    if quantization:
        entry = dict(_catalog_entry("models.yaml", mapping["model"])) | {"quantization_config": quantization}
        model = model_spec_from_hf_config(entry, mapping["model"])
        scenario = dataclasses.replace(scenario, model=model)
    return scenario


def simulate_point(point: dict, coefficients=None) -> dict | None:
    """The simulator's summary for a point (coefficients: `calibration: auto`'s unless given), or None."""
    from planner.calibration.resolve import resolve_cost_model
    from sim.driver import simulate
    from sim.metrics import summarize

    mapping, _ = scenario_mapping(point)
    if mapping is None:
        return None
    scenario = build_scenario(mapping)
    if coefficients is None:
        coefficients, _ = resolve_cost_model(scenario, "auto")
    result = simulate(scenario, coefficients, record_steps=False)
    return summarize(result.recorder, scenario.slo)


def compare(point: dict, summary: dict) -> dict[str, float]:
    """Signed relative error (predicted / measured - 1) of every figure the point publishes."""
    out = {}
    for published, ours in METRICS.items():
        measured = _num(point, published)
        if measured and summary.get(ours) is not None and math.isfinite(summary[ours]):
            out[published] = summary[ours] / measured - 1
    return out
