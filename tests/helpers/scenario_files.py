"""Scenario files written to disk: a minimal scenario, an inline model and GPU, and a file's error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.scenario.load import load_scenario

MINIMAL = """\
model: qwen-7b
hardware:
  gpu: a10
workload:
  arrival: {rate: 2.0}
"""
RATE = "workload: {arrival: {rate: 2.0}}\n"

# A small Llama-style model, written inline so the tests do not depend on catalog figures.
INLINE_MODEL = {
    "model_type": "llama",
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 4,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
INLINE_GPU = {"memory_bytes": 24_000_000_000, "bf16_tflops": 100.0, "memory_bandwidth_gbps": 900.0}


def write(tmp_path: Path, text: str, name: str = "scen.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def load_error(path: Path, overrides: tuple[str, ...] = ()) -> str:
    """The message load_scenario refuses the file (with these --set overrides) with."""
    with pytest.raises(PlannerError) as info:
        load_scenario(path, overrides)
    return str(info.value)
