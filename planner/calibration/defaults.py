"""`planner calibrate`'s defaults: the sweep's budget and the held-out runs' size per device, and the
scenario it calibrates when given none (the tiny model on CPU; on CUDA the largest catalog model that fits
the visible GPU, whose catalog entry it finds by the device's name)."""

from __future__ import annotations

from pathlib import Path

from planner.errors import PlannerError
from sim.config import Scenario

DEFAULT_BUDGET_S = {"cpu": 45.0, "cuda": 240.0}
DEFAULT_HELD_OUT_REQUESTS = {"cpu": 32, "cuda": 200}
# The CPU default: scenarios/cpu_tiny.yaml's model and limits, with a pool big enough for every sweep shape
# (on CPU the memory model would hand the tiny model millions of blocks of host RAM).
CPU_DEFAULT = {
    "model": "tiny-llama",
    "dtype": "float32",
    "hardware": {"gpu": "cpu"},
    "engine": {"max_num_seqs": 16, "max_num_batched_tokens": 256, "max_model_len": 512, "num_gpu_blocks_override": 600},
}
DEFAULT_WORKLOAD = {"num_requests": 32, "seed": 0, "arrival": {"process": "poisson", "rate": 10.0}}  # for validation
CUDA_MAX_MODEL_LEN = 4096  # the sweep's longest context on CUDA (or the model's, if shorter)


def default_scenario(device: str, model: str | None) -> Scenario:
    from planner.scenario.load import validate_mapping

    if device == "cpu":
        data = CPU_DEFAULT | ({"model": model} if model else {})
        data |= {"name": f"calibrate-{data['model']}-cpu", "workload": DEFAULT_WORKLOAD}
        return validate_mapping(data, f"built-in default ({data['model']} on cpu)", Path.cwd())
    from planner.catalog import load_model_catalog

    gpu, catalog = catalog_gpu_for_device(), load_model_catalog()
    if model and model not in catalog:
        raise PlannerError(f"--model {model}: not in the model catalog; known: {', '.join(catalog)}")
    names = [model] if model else sorted(catalog, key=lambda name: -catalog[name].num_params)
    for name in names:
        max_len = min(CUDA_MAX_MODEL_LEN, catalog[name].max_position_embeddings)
        data = {"name": f"calibrate-{name}-{gpu}", "model": name, "dtype": "bfloat16", "hardware": {"gpu": gpu}}
        data |= {"engine": {"max_model_len": max_len}, "workload": DEFAULT_WORKLOAD}
        try:
            scenario = validate_mapping(data, f"built-in default ({name} on {gpu})", Path.cwd())
        except PlannerError:
            if model:
                raise
            continue  # e.g. a model this GPU's dtype or limits rule out: try the next one
        if not _fit_problems(scenario):
            return scenario
        if model:
            raise PlannerError(f"--model {model}: does not fit one {gpu}: " + "; ".join(_fit_problems(scenario)))
    raise PlannerError(f"no catalog model fits one {gpu}; give a scenario file")


def _fit_problems(scenario: Scenario) -> list[str]:
    from sim.memory import memory_breakdown
    from sim.memory_fit import fit_problems

    return fit_problems(scenario, memory_breakdown(scenario))


def catalog_gpu_for_device() -> str:
    """The catalog entry for the visible CUDA device, from its name and memory ("NVIDIA H100 80GB HBM3" ->
    h100-sxm: planner.calibration.device_gpu.catalog_gpu_of_device)."""
    import torch

    from planner.calibration.device_gpu import catalog_gpu_of_device

    name = torch.cuda.get_device_name(0)
    entry = catalog_gpu_of_device(name, torch.cuda.mem_get_info(0)[1])
    if entry is None:
        raise PlannerError(f"the GPU {name!r} has no catalog entry; give a scenario file naming hardware.gpu")
    return entry
