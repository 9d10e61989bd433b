"""Which catalog GPU a calibration measured (the device that ran, never only what the scenario names), and
which GPU a calibration is looked up by (`calibration_gpu`).

A profile is applied (`calibration: auto`) to the GPU it names, as measured there. A scenario naming an A10
that ran on this machine's CPU, or on an H100, once gave an "a10" profile: every later A10 simulation then
took its TPOT from the CPU (2,698 ms where the shipped calibration gives 32 ms). So the profile names the
device: a run on the CPU is the `cpu` entry, a CUDA device its catalog entry by name and memory; a scenario's
inline GPU (not in the catalog) is taken as the user's word for the device.
"""

from __future__ import annotations

import dataclasses
import re

from planner.catalog import COST_FIGURES, catalog_gpu, differs_from_catalog, gpu_names, load_gpu_catalog
from planner.errors import PlannerError
from sim.config import GpuSpec, Scenario

# Words of a catalog key that name a variant of a part, which a device's name may leave out ("NVIDIA H100 80GB
# HBM3" is the SXM part; "NVIDIA A100-SXM4-80GB" names its memory, not every A100 does). Every other word of the
# key must be a word of the name: "rtx-4090" needs "4090" (an RTX 3090 or an RTX A6000 is not one), "a100" is
# never found in "a10".
VARIANT_WORDS = {"sxm", "pcie", "40gb", "80gb"}
# A part whose name says one of these is that part, not its namesake: the H100 NVL (94 GB, its own bandwidth) is
# no catalog part though its name says H100; the H200 NVL is (h200-nvl), not the H200 SXM.
OTHER_PARTS = {"nvl"}


def catalog_gpu_of_device(device_name: str, total_bytes: int) -> str | None:
    """The catalog GPU a CUDA device is (torch.cuda.get_device_name, mem_get_info()[1]), or None when the catalog
    has no such part. Between variants: the one whose words the name says most, then PCIe only when the name says
    it (NVIDIA names its PCIe cards so), then the nearer memory size."""
    words = set(re.split(r"[^a-z0-9]+", device_name.lower()))
    candidates = []
    for key, spec in load_gpu_catalog().items():
        parts = key.split("-")
        if (words & OTHER_PARTS) - set(parts):  # an NVL part only where the catalog has that NVL part
            continue
        if all(part in words for part in parts if part not in VARIANT_WORDS):
            named = sum(part in words for part in parts)
            form = ("pcie" in words) == ("pcie" in parts)
            candidates.append((named, form, -abs(spec.memory_bytes - total_bytes), key))
    return max(candidates)[3] if candidates else None


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


def calibration_gpu(gpu: GpuSpec) -> GpuSpec:
    """The GPU as calibrations know it. An inline mapping that takes a catalog GPU's name with other figures
    the cost model prices by (catalog.COST_FIGURES: a price, a TDP or the memory do not count) is not that GPU:
    a profile of the catalog's was measured against the catalog's figures (an inline "a100-80gb" of 100 GB/s
    was called calibrated ±1% by the A100's). It goes by a name no profile of the catalog GPU has; profiles
    measured on it are written under that name too (planner/calibration/profile.py, fitting.py)."""
    if differs_from_catalog(gpu, COST_FIGURES):
        return dataclasses.replace(gpu, name=f"{gpu.name} (inline, other figures)")
    return gpu
