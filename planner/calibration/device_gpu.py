"""Which catalog GPU a calibration measured: the device that ran, never only what the scenario names.

A profile is applied (`calibration: auto`) to the GPU it names, as measured there. A scenario naming an A10
that ran on this machine's CPU, or on an H100, once gave an "a10" profile: every later A10 simulation then
took its TPOT from the CPU (2,698 ms where the shipped calibration gives 32 ms). So the profile names the
device: a run on the CPU is the `cpu` entry, a CUDA device its catalog entry by name and memory; a scenario's
inline GPU (not in the catalog) is taken as the user's word for the device.
"""

from __future__ import annotations

import dataclasses
import re

from planner.catalog import catalog_gpu, gpu_names, load_gpu_catalog
from planner.errors import PlannerError
from sim.config import Scenario


def catalog_gpu_of_device(device_name: str, total_bytes: int) -> str | None:
    """The catalog GPU a CUDA device is (torch.cuda.get_device_name, mem_get_info()[1]): the key's first word must be a word of the device name ("a100" in
    "NVIDIA A100-SXM4-80GB", never "a10"); more matching words ("80gb", "pcie"), then the nearer memory size,
    decide between variants. None when the catalog has no such GPU."""
    words = set(re.split(r"[^a-z0-9]+", device_name.lower()))
    candidates = [
        (sum(w in words for w in key.split("-")), -abs(spec.memory_bytes - total_bytes), key)
        for key, spec in load_gpu_catalog().items()
        if key.split("-")[0] in words
    ]
    return max(candidates)[2] if candidates else None


def measured_gpu(scenario_gpu: str, kind: str, device_name: str | None, total_bytes: int | None, where: str) -> str:
    """The catalog GPU (or the scenario's inline one) whose profile a measurement on this device gives."""
    if kind == "cpu":
        return "cpu"
    found = catalog_gpu_of_device(device_name or "", total_bytes or 0)
    if found is not None:
        return found
    if scenario_gpu in gpu_names():
        raise PlannerError(
            f"{where}: measured on {device_name!r}, which has no GPU catalog entry, but hardware.gpu names the"
            f" catalog's {scenario_gpu}: a profile is applied to the GPU it names; describe this device inline"
            " (hardware.gpu: {name: ..., memory_bytes: ..., bf16_tflops: ..., memory_bandwidth_gbps: ...})"
        )
    return scenario_gpu


def on_measured_gpu(scenario: Scenario, gpu: str, say, where: str) -> Scenario:
    """The scenario with hardware.gpu the GPU measured, said when it changes."""
    named = scenario.hardware.gpu.name
    if gpu == named:
        return scenario
    say(f"{where}: hardware.gpu {named} -> {gpu}: the profile is of the device that was measured")
    return dataclasses.replace(scenario, hardware=dataclasses.replace(scenario.hardware, gpu=catalog_gpu(gpu)))
