"""The GPU and model catalogs (a catalog model is read as an HF config.json: `planner/catalog/hf_config.py`).

`gpus.yaml` and `models.yaml` ship as package data beside this file; every figure in them carries its
source in a comment. Models are stored with their HF config.json key names, so the catalog and a user's
own config.json go through the same `model_spec_from_hf_config`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from planner.catalog.errors import CatalogError
from planner.catalog.hf_config import SUPPORTED_MODEL_TYPES, load_model_config_path, model_spec_from_hf_config
from planner.scenario.yaml_loader import parse_packaged_yaml
from sim.config import GpuSpec, ModelSpec

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "CatalogError",
    "GpuFamily",
    "catalog_gpu",
    "catalog_model",
    "gpu_family",
    "gpu_names",
    "gpu_spec_from_mapping",
    "load_gpu_catalog",
    "load_model_catalog",
    "load_model_config_path",
    "model_names",
    "model_spec_from_hf_config",
]


# --- GPUs ----------------------------------------------------------------------------------------------

_GPU_FIELDS = {f.name: f for f in dataclasses.fields(GpuSpec) if f.name != "name"}
_GPU_COUNTS = ("memory_bytes", "gpus_per_node", "nvlink_domain_gpus")  # whole numbers: bytes, GPUs
_GPU_REQUIRED = {name for name, f in _GPU_FIELDS.items() if f.default is dataclasses.MISSING}


def gpu_spec_from_mapping(d: Mapping[str, Any], name: str) -> GpuSpec:
    """A GpuSpec from a mapping with GpuSpec's field names (catalog entry or inline scenario spec).

    A `name` key in the mapping is ignored: the `name` argument (the catalog key) names the GPU.
    """
    if not isinstance(d, Mapping):
        raise CatalogError(f"gpu {name!r}: expected a mapping of GpuSpec fields, got {type(d).__name__}")
    unknown = sorted(set(d) - set(_GPU_FIELDS) - {"name"})
    if unknown:  # a typo (memory_gb, tflops) would otherwise silently fall back to a default
        raise CatalogError(f"gpu {name!r}: unknown field {unknown[0]!r}; fields are {', '.join(_GPU_FIELDS)}")
    values: dict[str, Any] = {}
    for key in _GPU_FIELDS:
        value = d.get(key)
        if value is None:
            if key in _GPU_REQUIRED:
                raise CatalogError(f"gpu {name!r}: missing required field {key!r}")
            values[key] = None
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise CatalogError(f"gpu {name!r}: {key} = {value!r}: must be a positive number")
        if key in _GPU_COUNTS:
            if not float(value).is_integer():  # 24e9 from YAML arrives as a float; 23.5 bytes is a mistake
                raise CatalogError(f"gpu {name!r}: {key} = {value!r}: must be a whole number")
            value = int(value)
        else:
            value = float(value)
        values[key] = value
    return GpuSpec(name=name, **values)


# --- catalogs (package data) ---------------------------------------------------------------------------

# A catalog's top-level keys: the lines that start in column 0 and are not comments (every other line of an
# entry is indented). tests/test_catalog.py checks that the entries split here read as the whole file does.
_TOP_LEVEL_KEY = re.compile(r"^([^\s#][^:]*):", re.MULTILINE)


@cache
def _catalog_entries(filename: str) -> dict[str, str]:
    """Catalog name -> the YAML text of its entry, split at the top-level keys without parsing: a command
    parses only the entries it uses (the whole of both catalogs took ~10% of a short `planner simulate`).
    Read beside this file, as planner/calibration/shipped.py reads the shipped calibrations."""
    text = Path(__file__).with_name(filename).read_text(encoding="utf-8")
    keys = list(_TOP_LEVEL_KEY.finditer(text))
    if not keys:
        raise CatalogError(f"planner/catalog/{filename}: expected a mapping of name -> entry")
    ends = [key.start() for key in keys[1:]] + [len(text)]
    return {key.group(1): text[key.start() : end] for key, end in zip(keys, ends)}


def _catalog_entry(filename: str, name: str) -> Any:
    return parse_packaged_yaml(_catalog_entries(filename)[name])[name]


def gpu_names() -> list[str]:
    """The GPU catalog's names, in file order."""
    return list(_catalog_entries("gpus.yaml"))


def model_names() -> list[str]:
    """The model catalog's names, in file order."""
    return list(_catalog_entries("models.yaml"))


# The figures the cost model prices a GPU by (sim/peak_rates.py, sim/cost_model.py): what a calibration fits.
COST_FIGURES = (
    "bf16_tflops",
    "fp8_tflops",
    "fp4_tflops",
    "fp32_tflops",
    "memory_bandwidth_gbps",
    "interconnect_bandwidth_gbps",
)


def differs_from_catalog(gpu: GpuSpec, figures: tuple[str, ...] | None = None) -> bool:
    """A GPU under a catalog GPU's name whose `figures` (every field when None) are not the catalog's: an
    inline mapping that borrowed the name. False for a name the catalog does not have."""
    if gpu.name not in gpu_names():
        return False
    catalog = catalog_gpu(gpu.name)
    if figures is None:
        return catalog != gpu
    return any(getattr(catalog, f) != getattr(gpu, f) for f in figures)


@cache
def catalog_gpu(name: str) -> GpuSpec:
    """One GPU of the catalog (KeyError if there is none of that name); parsed on first use."""
    entry = _catalog_entry("gpus.yaml", name)
    return gpu_spec_from_mapping({k: v for k, v in entry.items() if k != "family"}, name)


@dataclass(frozen=True)
class GpuFamily:
    """What a catalog GPU is beyond its figures: what a public profile transfers by (planner/calibration/
    transfer.py). Kept in the catalog entry, the one place a GPU's facts are written."""

    vendor: str  # nvidia | amd
    architecture: str  # ampere | ada | hopper | blackwell-sm100 | blackwell-sm120 | cdna3 | cdna4
    memory: str  # hbm | gddr


GPU_VENDORS = ("nvidia", "amd")
GPU_MEMORY_KINDS = ("hbm", "gddr")


@cache
def gpu_family(name: str) -> GpuFamily | None:
    """A catalog GPU's family; None for a name the catalog lacks (an inline GPU) or its host `cpu` entry."""
    if name not in gpu_names():
        return None
    family = _catalog_entry("gpus.yaml", name).get("family")
    if family is None:
        return None
    if not isinstance(family, Mapping) or set(family) != {"vendor", "architecture", "memory"}:
        raise CatalogError(f"gpu {name!r}: family = {family!r}: must be {{vendor, architecture, memory}}")
    if family["vendor"] not in GPU_VENDORS or family["memory"] not in GPU_MEMORY_KINDS:
        raise CatalogError(
            f"gpu {name!r}: family = {family!r}: vendor is one of {GPU_VENDORS}, memory one of {GPU_MEMORY_KINDS}"
        )
    return GpuFamily(str(family["vendor"]), str(family["architecture"]), str(family["memory"]))


@cache
def catalog_model(name: str) -> ModelSpec:
    """One model of the catalog (KeyError if there is none of that name); parsed on first use. Its checkpoint is
    the entry's `hf_repo`, the repository its config.json was copied from."""
    entry = _catalog_entry("models.yaml", name)
    return model_spec_from_hf_config(entry, name, checkpoint=entry.get("hf_repo"))


def load_gpu_catalog() -> dict[str, GpuSpec]:
    """Catalog name -> GpuSpec. Parsed once; each call returns a new dict (the specs are frozen)."""
    return {name: catalog_gpu(name) for name in gpu_names()}


def load_model_catalog() -> dict[str, ModelSpec]:
    """Catalog name -> ModelSpec. Parsed once; each call returns a new dict (the specs are frozen)."""
    return {name: catalog_model(name) for name in model_names()}
