"""Scenarios for the simulator's tests, built in code and validated like a file."""

from __future__ import annotations

import copy
from pathlib import Path

from planner.scenario.load import validate_mapping
from sim.config import Scenario

BASE = {
    "model": "llama-2-7b",
    "dtype": "bfloat16",
    "hardware": {"gpu": "a100-80gb"},
    "engine": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_model_len": 2048},
    "workload": {
        "num_requests": 200,
        "seed": 0,
        "arrival": {"process": "poisson", "rate": 50.0},
        "prompt_tokens": {"dist": "uniform", "low": 32, "high": 512},
        "output_tokens": {"dist": "uniform", "low": 8, "high": 512},
    },
}


def make_scenario(**sections) -> Scenario:
    """BASE with sections merged in one level deep, e.g. make_scenario(engine={"scheduler": "static"})."""
    data = copy.deepcopy(BASE)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return validate_mapping(data, "<test>", Path.cwd())
