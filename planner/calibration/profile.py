"""Calibration profiles: the YAML file `planner calibrate` writes, its content id, and the user's profile
folder. Reading one back strictly is profile_loader.py's job; which one a scenario uses, resolve.py's.

Schema (planner-calibration/1; shipped profiles under planner/calibrations/ use the same keys):
    format, id, created, source, device {name, kind, gpu, memory_bytes, driver, runtime, torch}, model, dtype,
    tensor_parallel_size, engine, coefficients, uncertainty, [correlation], fit {rows, median_abs_error,
    p90_abs_error, by_class}, rows, provenance

`correlation` (written only where the fit gives one): coefficient -> later coefficient -> the correlation of their
fitted values; pairs not listed are uncorrelated. A step's time sums several coefficients' terms, and where two of
them trade against each other (a per-step and a per-layer overhead on a model of few layers) each std is wide while
their sum is known well (planner/calibration/agreement.py carries both through).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from planner.calibration.device_gpu import calibration_gpu
from planner.calibration.fit import correlations
from planner.calibration.shipped import default_profile_dir
from planner.errors import PlannerError
from sim.config import HOST_DEVICES, Scenario
from sim.cost_coefficients import CostCoefficients

FORMAT = "planner-calibration/1"
SOURCES = ("live-sweep", "live-runs", "public-operator-profiles", "transferred", "vllm-metrics")
DEVICE_KINDS = ("cuda", "cpu")
DTYPES = ("bfloat16", "float16", "float32")
COEFFICIENTS = tuple(f.name for f in dataclasses.fields(CostCoefficients))
EFFICIENCIES = ("flops_efficiency", "bandwidth_efficiency", "interconnect_efficiency")  # in (0, 1]
# Dimensionless factors of the attention kernels (sim/cost_model.py), each with the range a real kernel lies in.
FACTORS = {"attention_flops_ratio": (0.05, 2.0), "mixed_step_attention_factor": (1.0, 10.0)}
KEYS = (
    "format", "id", "created", "source", "device", "model", "dtype", "tensor_parallel_size", "engine",
    "coefficients", "uncertainty", "correlation", "fit", "rows", "provenance",
)  # fmt: skip
DEVICE_KEYS = ("name", "kind", "gpu", "memory_bytes", "driver", "runtime", "torch")


class ProfileError(PlannerError):
    """A profile file that cannot be used: the message names the file and the field."""


@dataclass(frozen=True)
class Profile:
    """A calibration profile, as its YAML file holds it (the schema above)."""

    id: str
    created: str  # ISO 8601 UTC
    source: str
    device: dict  # name, kind (cuda | cpu), gpu (the catalog GPU), memory_bytes, driver, runtime, torch
    model: str | None  # None: a GPU-wide profile
    dtype: str
    tensor_parallel_size: int
    coefficients: dict[str, float]  # a subset of CostCoefficients' fields; the rest take defaults
    uncertainty: dict[str, float] = field(default_factory=dict)  # field -> one standard deviation
    correlation: dict[str, dict[str, float]] = field(default_factory=dict)  # field -> field -> correlation
    engine: dict = field(default_factory=dict)
    fit: dict = field(default_factory=dict)
    rows: str | None = None  # a CSV of the fitted rows, relative to the profile file
    provenance: str = ""
    path: Path | None = field(default=None, compare=False)  # where it was read from (not in the file)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "device", {key: self.device.get(key) for key in DEVICE_KEYS}
        )  # every key, None if unknown

    def cost_coefficients(self) -> CostCoefficients:
        return CostCoefficients(**self.coefficients)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "id": self.id,
            "created": self.created,
            "source": self.source,
            "device": {key: self.device.get(key) for key in DEVICE_KEYS},
            "model": self.model,
            "dtype": self.dtype,
            "tensor_parallel_size": self.tensor_parallel_size,
            "engine": dict(self.engine),
            "coefficients": {k: float(v) for k, v in self.coefficients.items()},
            "uncertainty": {k: float(v) for k, v in self.uncertainty.items()},
            # only where there is one: a profile without it keeps the content id it had before the key existed
            **({"correlation": {a: dict(r) for a, r in self.correlation.items()}} if self.correlation else {}),
            "fit": self.fit,
            "rows": self.rows,
            "provenance": self.provenance,
        }


def content_id(data: dict) -> str:
    """12 hex chars of the sha256 of the profile's content (without its id)."""
    body = yaml.safe_dump({k: v for k, v in data.items() if k != "id"}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:12]


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def save_profile(profile: Profile, path: Path | None = None) -> Path:
    """Write the profile (its id filled in from its content when empty); default: <profile dir>/<id>.yaml."""
    data = profile.to_dict()
    if not data["id"]:
        data["id"] = content_id(data)
    path = Path(path) if path is not None else default_profile_dir() / f"{data['id']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def this_device(scenario: Scenario, device: str | None = None) -> dict:
    """The fingerprint of the device this process measures on (`device` "cpu" or "cuda"; by default the
    scenario's: the `cpu` catalog entry means the host)."""
    import torch  # only calibration measures; simulating never imports torch

    if device is None:
        device = "cpu" if scenario.hardware.gpu.name in HOST_DEVICES or not torch.cuda.is_available() else "cuda"
    if device == "cpu":
        return {"name": "cpu", "kind": "cpu", "gpu": calibration_gpu(scenario.hardware.gpu).name, "memory_bytes": None,
                "driver": None, "runtime": None, "torch": str(torch.__version__)}  # fmt: skip
    total = torch.cuda.mem_get_info()[1]
    return {
        "name": torch.cuda.get_device_name(),
        "kind": "cuda",
        "gpu": calibration_gpu(scenario.hardware.gpu).name,
        "memory_bytes": int(total),
        "driver": None,  # torch does not expose the driver version
        "runtime": str(torch.version.cuda),
        "torch": str(torch.__version__),
    }


def fit_correlation(result) -> dict[str, dict[str, float]]:
    """The `correlation` block of a fit.FitResult (empty without a covariance)."""
    if result is None or result.covariance is None:
        return {}
    return correlations(result.names, result.covariance, result.std)


def covariance(profile: Profile, names: list[str]) -> np.ndarray:
    """The covariance of the profile's coefficients `names` (seconds and efficiencies as they are): its stds and
    correlations; a coefficient without a std is taken as known exactly (0), which it is not: said by the caller."""
    std = np.array([profile.uncertainty.get(n, 0.0) for n in names], dtype=np.float64)
    std[~np.isfinite(std)] = 0.0
    out = np.diag(std**2)
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i != j:
                r = profile.correlation.get(a, {}).get(b, profile.correlation.get(b, {}).get(a, 0.0))
                out[i, j] = r * std[i] * std[j]
    return out


def fit_summary(fit) -> dict:
    """The profile's `fit` block of a `fitting.StepFit`."""
    return {
        "rows": len(fit.result.relative_errors),
        "median_abs_error": fit.result.median_abs_error,
        "p90_abs_error": fit.result.p90_abs_error,
        "by_class": {k: {"median": v["median"], "p90": v["p90"]} for k, v in fit.by_class.items()},
    }


def profile_from_fit(
    scenario: Scenario,
    fit,
    source: str,
    engine: dict,
    rows_path: str | None,
    provenance: str,
    device: dict | None = None,
) -> Profile:
    """A profile of a `fitting.StepFit` for this scenario's model, dtype and tensor parallel size; its id is
    the hash of its content."""
    profile = Profile(
        id="",
        created=now_utc(),
        source=source,
        device=device if device is not None else this_device(scenario),
        model=scenario.model.name,
        dtype=scenario.dtype,
        tensor_parallel_size=scenario.hardware.tensor_parallel_size,
        coefficients={n: float(getattr(fit.coefficients, n)) for n in fit.result.names},
        uncertainty=dict(fit.uncertainty),
        correlation=fit_correlation(fit.result),
        engine=dict(engine),
        fit=fit_summary(fit),
        rows=rows_path,
        provenance=provenance,
    )
    return dataclasses.replace(profile, id=content_id(profile.to_dict()))
