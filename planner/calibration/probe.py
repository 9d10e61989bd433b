"""Calibration's memory probe: the live engine's start-up profile beside the memory model's prediction.

The profile is gpu_engine.profiling's (vLLM's determine_available_memory): weights, activation peak of a
max_num_batched_tokens step, non-torch memory, and the total the driver reports; the prediction is
sim.memory's for the same scenario. On CUDA the driver's total is measured, so the probe also says whether
the catalog's entry for the GPU differs from it.
"""

from __future__ import annotations

from sim.config import Scenario
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown

ROWS = (
    ("total_bytes", "total memory (driver)"),
    ("weights_bytes", "weights"),
    ("activation_bytes", "activation peak"),
    ("non_torch_bytes", "non-torch"),
    ("kv_cache_bytes", "memory for KV"),
    ("num_gpu_blocks", "num_gpu_blocks"),
)


def probe_memory(scenario: Scenario, runner) -> dict:
    """{"measured": profile, "predicted": memory model, "device": cpu|cuda} for a runner whose KV cache is
    not yet allocated. On CPU the total is the scenario's GPU entry (there is no driver to ask)."""
    from gpu_engine.profiling import profile_num_blocks

    e = scenario.engine
    total = None if runner.device.type == "cuda" else scenario.hardware.gpu.memory_bytes
    measured = profile_num_blocks(runner, e.max_num_batched_tokens, e.max_num_seqs, e.gpu_memory_utilization, total)
    predicted = memory_breakdown(EngineFacts.of(scenario)).to_dict()
    if e.num_gpu_blocks_override is not None:  # compare the memory model's own count, not the override
        predicted["num_gpu_blocks"] = max(0, predicted["kv_cache_bytes"]) // predicted["block_bytes"]
    return {
        "measured": measured,
        "predicted": predicted,
        "device": runner.device.type,
        "gpu": scenario.hardware.gpu.name,
    }


def _fmt(key: str, value: float) -> str:
    if key == "num_gpu_blocks":
        return f"{value:,.0f}"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f} B"


def diff_percent(measured: float, predicted: float) -> float | None:
    """(predicted - measured) / measured in %, None when nothing was measured."""
    return None if not measured else (predicted - measured) / abs(measured) * 100


def probe_lines(probe: dict) -> list[str]:
    measured, predicted = probe["measured"], probe["predicted"]
    lines = [
        "Memory probe: the engine's start-up profile vs the memory model",
        f"  {'':<22}{'measured':>14}{'model':>14}{'diff':>9}",
    ]
    for key, label in ROWS:
        diff = diff_percent(measured[key], predicted[key])
        shown = "-" if diff is None else f"{diff:+.1f}%"
        lines.append(f"  {label:<22}{_fmt(key, measured[key]):>14}{_fmt(key, predicted[key]):>14}{shown:>9}")
    if probe["device"] == "cuda":
        total, catalog = measured["total_bytes"], predicted["total_bytes"]
        verdict = (
            "matches" if total == catalog else f"differs ({catalog:,} bytes); put {total:,} into the catalog entry"
        )
        lines.append(f"  measured total memory {total:,} bytes; catalog entry {probe['gpu']} {verdict}")
    else:
        lines.append("  (CPU: the total is the catalog's `cpu` entry, and non-torch memory is not measurable)")
    return lines
