"""Calibration profiles: the YAML file `planner calibrate` writes, strict loading, the user's profile folder,
and which coefficients a scenario's simulation uses (`resolve_cost_model`) and where they came from.

Schema (planner-calibration/1; shipped profiles under planner/calibrations/ use the same keys):
    format, id, created, source, device {name, kind, gpu, memory_bytes, driver, runtime, torch}, model, dtype,
    tensor_parallel_size, engine, coefficients, uncertainty, fit {rows, median_abs_error, p90_abs_error,
    by_class}, rows, provenance
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from planner.errors import PlannerError, show_value
from sim.config import Scenario
from sim.cost_model import CostCoefficients

FORMAT = "planner-calibration/1"
SOURCES = ("live-sweep", "live-runs", "public-operator-profiles", "transferred")
DEVICE_KINDS = ("cuda", "cpu")
DTYPES = ("bfloat16", "float16", "float32")
COEFFICIENTS = tuple(f.name for f in dataclasses.fields(CostCoefficients))
EFFICIENCIES = ("flops_efficiency", "bandwidth_efficiency", "interconnect_efficiency")  # in (0, 1]
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "calibrations"
KEYS = (
    "format", "id", "created", "source", "device", "model", "dtype", "tensor_parallel_size", "engine",
    "coefficients", "uncertainty", "fit", "rows", "provenance",
)  # fmt: skip
DEVICE_KEYS = ("name", "kind", "gpu", "memory_bytes", "driver", "runtime", "torch")


class ProfileError(PlannerError):
    """A profile file that cannot be used: the message names the file and the field."""


@dataclass(frozen=True)
class Profile:
    id: str
    created: str  # ISO 8601 UTC
    source: str
    device: dict  # name, kind (cuda | cpu), gpu (the catalog GPU), memory_bytes, driver, runtime, torch
    model: str | None  # None: a GPU-wide profile
    dtype: str
    tensor_parallel_size: int
    coefficients: dict[str, float]  # a subset of CostCoefficients' fields; the rest take defaults
    uncertainty: dict[str, float] = field(default_factory=dict)  # field -> one standard deviation
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
            "fit": self.fit,
            "rows": self.rows,
            "provenance": self.provenance,
        }


@dataclass(frozen=True)
class Provenance:
    """Where a simulation's cost model came from, shown in every summary, printout and plot."""

    kind: str  # spec-sheet | calibrated | transferred
    label: str  # the printable string
    profile_id: str | None = None
    uncertainty: dict[str, float] = field(default_factory=dict)  # coefficient -> std (empty: none known)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


SPEC_SHEET = Provenance("spec-sheet", "spec-sheet")
# A Provenance's uncertainty may also hold this key: the relative std of the step time that the fitted
# coefficients leave unexplained (the fit's residual spread, 1.4826 x its median |relative error|: a robust
# std). `--intervals` draws it as one factor on every step of a run (planner/calibration/intervals.py).
STEP_TIME_SPREAD = "step_time_rel"


def residual_spread(fit: dict | None) -> dict[str, float]:
    """{STEP_TIME_SPREAD: std} from a profile's fit section, or {} when it has no median error."""
    median = (fit or {}).get("median_abs_error")
    return {STEP_TIME_SPREAD: 1.4826 * float(median)} if isinstance(median, int | float) and median > 0 else {}


def content_id(data: dict) -> str:
    """12 hex chars of the sha256 of the profile's content (without its id)."""
    body = yaml.safe_dump({k: v for k, v in data.items() if k != "id"}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:12]


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def default_profile_dir() -> Path:
    """$PLANNER_PROFILE_DIR, else $XDG_CONFIG_HOME/planner/profiles, else ~/.config/planner/profiles."""
    if os.environ.get("PLANNER_PROFILE_DIR"):
        return Path(os.environ["PLANNER_PROFILE_DIR"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "planner" / "profiles"


def save_profile(profile: Profile, path: Path | None = None) -> Path:
    """Write the profile (its id filled in from its content when empty); default: <profile dir>/<id>.yaml."""
    data = profile.to_dict()
    if not data["id"]:
        data["id"] = content_id(data)
    path = Path(path) if path is not None else default_profile_dir() / f"{data['id']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def this_device(scenario: Scenario) -> dict:
    """The fingerprint of the device this process measures on: the `cpu` catalog entry means the host."""
    import torch  # only calibration measures; simulating never imports torch

    if scenario.hardware.gpu.name == "cpu" or not torch.cuda.is_available():
        return {"name": "cpu", "kind": "cpu", "gpu": scenario.hardware.gpu.name, "memory_bytes": None,
                "driver": None, "runtime": None, "torch": str(torch.__version__)}  # fmt: skip
    total = torch.cuda.mem_get_info()[1]
    return {
        "name": torch.cuda.get_device_name(),
        "kind": "cuda",
        "gpu": scenario.hardware.gpu.name,
        "memory_bytes": int(total),
        "driver": None,  # torch does not expose the driver version
        "runtime": str(torch.version.cuda),
        "torch": str(torch.__version__),
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
    from planner.calibration.fitting import fit_summary  # fitting imports this module

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
        engine=dict(engine),
        fit=fit_summary(fit),
        rows=rows_path,
        provenance=provenance,
    )
    return dataclasses.replace(profile, id=content_id(profile.to_dict()))


# ---------------------------------------------------------------------------------------------------------
# Strict loading


def _fail(path: Path, key: str, value: Any, allowed: str) -> ProfileError:
    shown = "" if value is _MISSING else f" = {show_value(value)}"
    return ProfileError(f"{path}: calibration profile: {key}{shown}: {allowed}")


_MISSING: Any = object()


def _get(data: dict, key: str, path: Path, prefix: str = "") -> Any:
    if key not in data:
        raise _fail(path, prefix + key, _MISSING, "missing")
    return data[key]


def _text(value: Any, key: str, path: Path, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise _fail(path, key, value, "expected a non-empty string" + (" or null" if optional else ""))
    return value


def _int(value: Any, key: str, path: Path, optional: bool = False, minimum: int = 0) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(path, key, value, f"expected an integer >= {minimum}" + (" or null" if optional else ""))
    return value


def _number_map(value: Any, key: str, path: Path, check) -> dict[str, float]:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise _fail(path, key, value, "expected a mapping of coefficient name to number")
    out = {}
    for name, number in value.items():
        if name not in COEFFICIENTS:
            raise _fail(path, f"{key}.{name}", _MISSING, "unknown coefficient; allowed: " + ", ".join(COEFFICIENTS))
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
            raise _fail(path, f"{key}.{name}", number, "expected a finite number")
        problem = check(name, float(number))
        if problem:
            raise _fail(path, f"{key}.{name}", number, problem)
        out[name] = float(number)
    return out


def _coefficient_problem(name: str, value: float) -> str:
    if name in EFFICIENCIES:
        return "" if 0 < value <= 1 else "an efficiency must be in (0, 1]"
    return "" if value >= 0 else "an overhead or latency must be >= 0 (seconds)"


def load_profile(path: str | Path) -> Profile:
    """Read and check a profile file; any problem raises ProfileError naming the file and the field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such calibration profile") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"{path}: cannot read the calibration profile: {e}") from None
    except yaml.YAMLError as e:
        raise ProfileError(f"{path}: calibration profile: invalid YAML: {e}") from None
    if not isinstance(data, dict):
        raise _fail(path, "top level", data, "expected a mapping with keys " + ", ".join(KEYS))
    for key in data:
        if key not in KEYS:
            raise _fail(path, str(key), _MISSING, "unknown key; allowed: " + ", ".join(KEYS))
    if _get(data, "format", path) != FORMAT:
        raise _fail(path, "format", data["format"], f"expected {FORMAT}")
    profile_id = _text(_get(data, "id", path), "id", path)
    created = _get(data, "created", path)
    if isinstance(created, dt.datetime | dt.date):  # YAML reads an unquoted timestamp as one
        created = created.isoformat()
    created = _text(created, "created", path)
    try:
        dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        raise _fail(path, "created", created, "expected an ISO 8601 time, e.g. 2026-12-01T04:00:00Z") from None
    source = _get(data, "source", path)
    if source not in SOURCES:
        raise _fail(path, "source", source, "must be one of " + ", ".join(SOURCES))
    device = _get(data, "device", path)
    if not isinstance(device, dict):
        raise _fail(path, "device", device, "expected a mapping with keys " + ", ".join(DEVICE_KEYS))
    for key in device:
        if key not in DEVICE_KEYS:
            raise _fail(path, f"device.{key}", _MISSING, "unknown key; allowed: " + ", ".join(DEVICE_KEYS))
    kind = _get(device, "kind", path, "device.")
    if kind not in DEVICE_KINDS:
        raise _fail(path, "device.kind", kind, "must be one of " + ", ".join(DEVICE_KINDS))
    dev = {
        "name": _text(_get(device, "name", path, "device."), "device.name", path),
        "kind": kind,
        "gpu": _text(device.get("gpu"), "device.gpu", path, optional=True),
        "memory_bytes": _int(device.get("memory_bytes"), "device.memory_bytes", path, optional=True, minimum=1),
        **{k: _text(device.get(k), f"device.{k}", path, optional=True) for k in ("driver", "runtime", "torch")},
    }
    dtype = _get(data, "dtype", path)
    if dtype not in DTYPES:
        raise _fail(path, "dtype", dtype, "must be one of " + ", ".join(DTYPES))
    engine = data.get("engine") or {}
    if not isinstance(engine, dict):
        raise _fail(path, "engine", engine, "expected a mapping of engine settings (may be {})")
    fit = data.get("fit") or {}
    if not isinstance(fit, dict):
        raise _fail(path, "fit", fit, "expected a mapping (rows, median_abs_error, p90_abs_error, by_class)")
    coefficients = _number_map(_get(data, "coefficients", path), "coefficients", path, _coefficient_problem)
    uncertainty = _number_map(
        data.get("uncertainty"), "uncertainty", path, lambda n, v: "" if v >= 0 else "a std must be >= 0"
    )
    return Profile(
        id=profile_id,
        created=created,
        source=source,
        device=dev,
        model=_text(_get(data, "model", path), "model", path, optional=True),
        dtype=dtype,
        tensor_parallel_size=_int(_get(data, "tensor_parallel_size", path), "tensor_parallel_size", path, minimum=1),
        coefficients=coefficients,
        uncertainty=uncertainty,
        engine=engine,
        fit=fit,
        rows=_text(data.get("rows"), "rows", path, optional=True),
        provenance=str(data.get("provenance") or ""),
        path=path,
    )


# ---------------------------------------------------------------------------------------------------------
# Which profile a scenario uses


def mismatches(profile: Profile, scenario: Scenario, check_model: bool = True) -> list[str]:
    """What differs between where the profile was measured and what the scenario simulates."""
    out = []
    gpu = scenario.hardware.gpu.name
    if profile.device["gpu"] != gpu:
        out.append(f"it was measured on {profile.device['gpu'] or profile.device['name']}, the scenario's GPU is {gpu}")
    if profile.dtype != scenario.dtype:
        out.append(f"its dtype is {profile.dtype}, the scenario's is {scenario.dtype}")
    tp = scenario.hardware.tensor_parallel_size
    if profile.tensor_parallel_size != tp:
        out.append(f"its tensor_parallel_size is {profile.tensor_parallel_size}, the scenario's is {tp}")
    if check_model and profile.model is not None and profile.model != scenario.model.name:
        out.append(f"its model is {profile.model}, the scenario's is {scenario.model.name}")
    return out


def _date(profile: Profile) -> str:
    return profile.created[:10]


def _uncertainty(profile: Profile) -> dict[str, float]:
    """The coefficients' stds and the fit's residual spread: what `--intervals` draws."""
    return dict(profile.uncertainty) | residual_spread(profile.fit)


def calibrated(profile: Profile) -> Provenance:
    label = f"calibrated ({profile.id}, {_date(profile)}, {profile.device['name']})"
    return Provenance("calibrated", label, profile.id, _uncertainty(profile))


def transferred(profile: Profile) -> Provenance:
    label = f"transferred (from {profile.id}: {profile.model} on {profile.device['name']}, {_date(profile)})"
    return Provenance("transferred", label, profile.id, _uncertainty(profile))


def _profiles_in(folder: Path) -> list[Profile]:
    if not folder.is_dir():
        return []
    return [load_profile(p) for p in sorted(folder.glob("*.yaml"))]


def _newest(profiles: list[Profile]) -> Profile | None:
    return max(profiles, key=lambda p: p.created) if profiles else None


def resolve_cost_model(
    scenario: Scenario, calibration: str | None = None, base_dir: Path | None = None
) -> tuple[CostCoefficients, Provenance]:
    """The coefficients for this scenario and where they came from.

    `calibration` (the --calibration flag; None: the scenario's `calibration` key): a profile FILE, used
    only if it was measured on the scenario's GPU, dtype, tensor parallel size and model (or is GPU-wide);
    or `auto`: the newest profile in the user's folder that matches all four (`calibrated`), else the
    newest there on the same GPU, dtype and tensor parallel size for another model (`transferred`), else the
    shipped public calibrations: the GPU's own (`calibrated`) or transferred to it from the profiled GPUs;
    a CPU keeps the spec-sheet defaults.
    """
    choice = calibration if calibration is not None else scenario.calibration
    if choice != "auto":
        path = Path(choice).expanduser()
        if not path.is_absolute() and calibration is None:  # the scenario key: relative to the scenario's folder
            path = (base_dir if base_dir is not None else Path(scenario.source).absolute().parent) / path
        profile = load_profile(path)
        problems = mismatches(profile, scenario)
        if problems:
            raise ProfileError(
                f"{path}: calibration profile {profile.id} does not match scenario {scenario.source}: "
                + "; ".join(problems)
                + " (use `calibration: auto`, or calibrate for this scenario: planner calibrate)"
            )
        return profile.cost_coefficients(), calibrated(profile)
    profiles = _profiles_in(default_profile_dir())
    same = _newest([p for p in profiles if not mismatches(p, scenario)])
    if same is not None:
        return same.cost_coefficients(), calibrated(same)
    other = _newest([p for p in profiles if not mismatches(p, scenario, check_model=False)])
    if other is not None:
        return other.cost_coefficients(), transferred(other)
    return _public(scenario)


def _public(scenario: Scenario) -> tuple[CostCoefficients, Provenance]:
    """The shipped public calibrations (planner/calibrations/): the GPU's own profile, or coefficients
    transferred from the profiled GPUs with the spread leave-one-GPU-out measured. A CPU is no GPU:
    nothing transfers to it, it keeps the spec-sheet defaults until `planner calibrate --device cpu`."""
    gpu = scenario.hardware.gpu
    if gpu.name == "cpu":
        return CostCoefficients(), SPEC_SHEET
    from planner.calibration.transfer import public_cost_model  # reads one to three small YAML files

    tp = scenario.hardware.tensor_parallel_size
    coefficients, uncertainty, label, ids = public_cost_model(gpu, scenario.dtype, tp)
    kind = "calibrated" if label.startswith("calibrated") else "transferred"
    profile_id = ", ".join(ids)
    return CostCoefficients(**coefficients), Provenance(kind, label, profile_id, uncertainty)
