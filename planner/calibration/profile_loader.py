"""Strict loading of a calibration profile file (the schema of profile.py): any problem raises ProfileError
naming the file and the field."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import yaml

from planner.calibration.profile import (
    COEFFICIENTS,
    DEVICE_KEYS,
    DEVICE_KINDS,
    DTYPES,
    EFFICIENCIES,
    FORMAT,
    KEYS,
    SOURCES,
    Profile,
    ProfileError,
)
from planner.errors import PlannerError, read_text_file, show_value

MAX_PROFILE_BYTES = 1 << 20  # a profile is ~2 kB of coefficients and a validation table; a larger file is not one


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
    try:  # missing, a folder, a FIFO, too large, not UTF-8 (the line and column of the bad byte): said as such
        text = read_text_file(path, "calibration profile", MAX_PROFILE_BYTES)
    except PlannerError as e:
        raise ProfileError(str(e)) from None
    try:
        data = yaml.safe_load(text)
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
