"""Strict loading of a calibration profile file (the schema of profile.py): any problem raises ProfileError
naming the file and the field."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from planner.calibration.profile import (
    COEFFICIENTS,
    DEVICE_KEYS,
    DEVICE_KINDS,
    DTYPES,
    EFFICIENCIES,
    FACTORS,
    FORMAT,
    KEYS,
    SOURCES,
    Profile,
    ProfileError,
)
from planner.errors import PlannerError, read_text_file, show_value
from planner.scenario.yaml_loader import parse_yaml11_unique_keys

MAX_PROFILE_BYTES = 1 << 20  # a profile is ~2 kB of coefficients and a validation table; a larger file is not one
# Bounds no real measurement comes near, so that a typo (1e300, 5e-324) cannot make a step take an infinite time.
# An efficiency is a share of the spec peak: fits are kept >= 0.01 (fitting.BOUNDS), so 1e-4 is a hundred times
# below any fitted value. The overheads and latencies (every `_s` coefficient of CostCoefficients: per step, per
# scheduled row, per layer, per all-reduce call) measure microseconds to a millisecond (fits are kept <= 0.1 s),
# so 10 s is none.
MIN_EFFICIENCY = 1e-4
MAX_OVERHEAD_S = 10.0
# The fit's median and p90 |relative error| (0.03: 3%): a fit 1000% off is no calibration; above it the
# residual spread `--intervals` draws from (provenance.residual_spread) scales steps by overflowing factors.
MAX_RELATIVE_ERROR = 10.0
# the correlations are written to 6 decimals: rounding moves an eigenvalue by at most (number of terms) x 5e-7
CORRELATION_SLACK = 1e-4
FIT_KEYS = ("rows", "median_abs_error", "p90_abs_error", "by_class")
CLASS_KEYS = ("rows", "median", "p90")  # each step class's in fit.by_class


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
            hint = ""
            if isinstance(number, str) and _is_float_text(number):  # YAML 1.1 reads 4e-05 as text, 4.0e-05 as a number
                mantissa, _, exponent = number.lower().partition("e")
                signed = exponent if exponent[:1] in "+-" else "+" + exponent
                spelled = (mantissa if "." in mantissa else mantissa + ".0") + ("e" + signed if exponent else "")
                hint = (
                    " (a profile is YAML 1.1, which reads a number with an exponent only with a dot and a signed"
                    f" exponent: write {spelled})"
                )
            raise _fail(path, f"{key}.{name}", number, "expected a finite number" + hint)
        problem = check(name, float(number))
        if problem:
            raise _fail(path, f"{key}.{name}", number, problem)
        out[name] = float(number)
    return out


def _is_float_text(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _coefficient_problem(name: str, value: float) -> str:
    if name in FACTORS:
        lo, hi = FACTORS[name]
        return "" if lo <= value <= hi else f"a factor in [{lo:g}, {hi:g}]"
    if name in EFFICIENCIES:
        return "" if MIN_EFFICIENCY <= value <= 1 else f"an efficiency must be in (0, 1] and >= {MIN_EFFICIENCY:g}"
    return "" if 0 <= value <= MAX_OVERHEAD_S else f"an overhead or latency must be in [0, {MAX_OVERHEAD_S:g}] seconds"


def _relative_error(value: Any, key: str, path: Path) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_RELATIVE_ERROR:
        raise _fail(path, key, value, f"expected a relative error in [0, {MAX_RELATIVE_ERROR:g}] (0.05: 5%)")


def _fit(value: Any, path: Path) -> dict:
    """The fit section, checked: its errors feed `--intervals` (a NaN or 1e300 there would overflow a draw)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, "fit", value, "expected a mapping with keys " + ", ".join(FIT_KEYS))
    for key, item in value.items():
        if key == "rows":
            _int(item, "fit.rows", path)
        elif key == "by_class":
            if not isinstance(item, dict):
                raise _fail(path, "fit.by_class", item, "expected a mapping of step class to " + ", ".join(CLASS_KEYS))
            for name, stats in item.items():
                where = f"fit.by_class.{name}"
                if not isinstance(stats, dict):
                    raise _fail(path, where, stats, "expected a mapping with keys " + ", ".join(CLASS_KEYS))
                for stat, number in stats.items():
                    if stat not in CLASS_KEYS:
                        raise _fail(path, f"{where}.{stat}", _MISSING, "unknown key; allowed: " + ", ".join(CLASS_KEYS))
                    if stat == "rows":
                        _int(number, f"{where}.rows", path)
                    else:
                        _relative_error(number, f"{where}.{stat}", path)
        elif key in ("median_abs_error", "p90_abs_error"):
            _relative_error(item, f"fit.{key}", path)
        else:
            raise _fail(path, f"fit.{key}", _MISSING, "unknown key; allowed: " + ", ".join(FIT_KEYS))
    return value


def _correlation(value: Any, uncertainty: dict[str, float], path: Path) -> dict[str, dict[str, float]]:
    """The correlation block, checked: pairs of coefficients with a std, each in [-1, 1], given once, and together a
    correlation matrix (no eigenvalue below -CORRELATION_SLACK: a draw from it must exist)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, "correlation", value, "expected a mapping of coefficient to {coefficient: correlation}")
    out: dict[str, dict[str, float]] = {}
    for name, row in value.items():
        if name not in uncertainty:
            raise _fail(path, f"correlation.{name}", _MISSING, "not a coefficient with an uncertainty in this profile")
        if not isinstance(row, dict):
            raise _fail(path, f"correlation.{name}", row, "expected a mapping of coefficient to correlation")
        for other, r in row.items():
            where = f"correlation.{name}.{other}"
            if other not in uncertainty or other == name:
                raise _fail(path, where, _MISSING, "not another coefficient with an uncertainty in this profile")
            if other in out and name in out[other]:
                raise _fail(path, where, r, f"given twice (correlation.{other}.{name} too)")
            if isinstance(r, bool) or not isinstance(r, int | float) or not -1 <= r <= 1:
                raise _fail(path, where, r, "expected a correlation in [-1, 1]")
            out.setdefault(name, {})[other] = float(r)
    names = sorted({n for a, row in out.items() for n in (a, *row)})
    matrix = np.eye(len(names))
    for a, row in out.items():
        for b, r in row.items():
            matrix[names.index(a), names.index(b)] = matrix[names.index(b), names.index(a)] = r
    lowest = float(np.linalg.eigvalsh(matrix).min()) if names else 1.0
    if lowest < -CORRELATION_SLACK:
        raise _fail(path, "correlation", value, f"not a correlation matrix (an eigenvalue of {lowest:.3g}, below 0)")
    return out


def _parse(text: str, path: Path) -> Any:
    """The file's data, as `save_profile` wrote it: by YAML 1.1 (yaml.safe_dump's), which the scenarios' YAML 1.2
    loader would misread (a content id 012345678901 as a number); any problem one line naming the file."""
    where = f"{path}: calibration profile: "
    try:
        return parse_yaml11_unique_keys(text)  # libyaml refuses nesting beyond 1,000 levels
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = "; ".join(p for p in (e.context, e.problem) if p)
        raise ProfileError(f"{where}{at}invalid YAML: {what}") from None
    except yaml.reader.ReaderError as e:  # a control character
        line = text.count("\n", 0, e.position) + 1
        column = e.position - text.rfind("\n", 0, e.position)
        char = e.character if isinstance(e.character, str) else chr(e.character)
        raise ProfileError(
            f"{where}line {line}, column {column}: invalid YAML: character U+{ord(char):04X}: {e.reason}"
        ) from None
    except yaml.YAMLError as e:
        raise ProfileError(f"{where}invalid YAML: {' '.join(str(e).split())}") from None
    except RecursionError:  # PyYAML's pure-Python parser, where it has no libyaml, recurses per level
        raise ProfileError(f"{where}invalid YAML: nested too deeply (a profile nests 4 levels)") from None
    except (ValueError, OverflowError) as e:  # a timestamp out of range (created: 2026-02-30)
        raise ProfileError(f"{where}invalid YAML: {e}") from None


def load_profile(path: str | Path) -> Profile:
    """Read and check a profile file; any problem raises ProfileError naming the file and the field."""
    path = Path(path)
    try:  # missing, a folder, a FIFO, too large, not UTF-8 (the line and column of the bad byte): said as such
        text = read_text_file(path, "calibration profile", MAX_PROFILE_BYTES)
    except PlannerError as e:
        raise ProfileError(str(e)) from None
    data = _parse(text, path)
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
    fit = _fit(data.get("fit"), path)
    coefficients = _number_map(_get(data, "coefficients", path), "coefficients", path, _coefficient_problem)
    uncertainty = _number_map(
        data.get("uncertainty"), "uncertainty", path, lambda n, v: "" if v >= 0 else "a std must be >= 0"
    )
    correlation = _correlation(data.get("correlation"), uncertainty, path)
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
        correlation=correlation,
        engine=engine,
        fit=fit,
        rows=_text(data.get("rows"), "rows", path, optional=True),
        provenance=str(data.get("provenance") or ""),
        path=path,
    )
