"""Reading a trace file: the named columns of a CSV or JSON Lines file as read-only float64 arrays, every value
checked (a number, finite, in range), a bad one named by file, line and column; a file is read once per process
while it is unchanged."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from sim.errors import WorkloadError
from sim.json_keys import DuplicateKeyError, unique_keys

# What a trace may hold. Token counts: whole-ish numbers in [0, MAX_TRACE_TOKENS] (0 is clipped to the
# distribution's min, 1 by default, as every drawn length is; a negative count is an error, never clipped).
# Arrival times: finite seconds within +-MAX_TRACE_SECONDS (they are shifted to start at 0).
MAX_TRACE_TOKENS = 1 << 24
MAX_TRACE_SECONDS = 1e10
MAX_TRACE_BYTES = 1 << 28  # 256 MiB: a trace is read whole; the shipped ones are 0.3-0.9 MB


def read_trace(path: str | Path, columns: Sequence[str], arrival_column: str | None = None) -> dict[str, np.ndarray]:
    """The named columns of a trace file as read-only float64 arrays, in file order.

    CSV with a header row, or JSON Lines (one object a line) when the name ends in .jsonl or .ndjson. Every
    value is checked (a number, finite, in range: token counts non-negative, `arrival_column` in seconds);
    a bad one is a WorkloadError naming the file, the line and the column. A file is read once per process
    while it is unchanged: `planner simulate` checks the workload before the run generates it again.
    """
    path = Path(path)
    if not path.is_file():  # also refuses a FIFO or a device before opening it: reading one would block
        raise WorkloadError(f"trace file {path} not found" if not path.exists() else f"{path}: not a regular file")
    stat = path.stat()
    if stat.st_size > MAX_TRACE_BYTES:
        raise WorkloadError(f"trace file {path}: larger than {MAX_TRACE_BYTES:,} bytes")
    version = (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return dict(_read_trace(path, tuple(columns), arrival_column, version))


@lru_cache(maxsize=4)
def _read_trace(
    path: Path, columns: tuple[str, ...], arrival_column: str | None, version: tuple[int, ...]
) -> dict[str, np.ndarray]:
    """read_trace's work; `version` (the file's identity, mtime and size) only keys the cache."""
    text = _decode(path, path.read_bytes())
    is_csv = path.suffix not in (".jsonl", ".ndjson")
    table = _read_plain_csv(text, list(columns), arrival_column) if is_csv else None
    if table is None:  # not plain (or bad): read row by row, to name the line of the first bad value
        values, lines, where = (_read_csv if is_csv else _read_jsonl)(path, text, list(columns))
        table = {
            c: _check_values(path, c, values[c], lines, where[c], c == arrival_column, text_numbers=is_csv)
            for c in columns
        }
    for values in table.values():
        values.setflags(write=False)  # shared by every caller of the cache
    return table


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise WorkloadError(
            f"trace file {path}: line {line}, column {column}: byte 0x{data[e.start]:02x} is not UTF-8 text"
            " (a binary or UTF-16 file?)"
        ) from None


# What a plain CSV's rows hold: nothing the csv module reads other than as a split at every comma and newline,
# and numbers that float() and numpy's loadtxt read alike (both parse with CPython's PyOS_string_to_double).
_PLAIN_ROWS = re.compile(r"[0-9.eE+\-,\n]*")


def _read_plain_csv(text: str, columns: list[str], arrival_column: str | None) -> dict[str, np.ndarray] | None:
    """The columns of a plain CSV (a header line of unquoted names, then _PLAIN_ROWS), read by numpy in C.

    None for any other file, or a row without the columns, or a value that is not a number in range: _read_csv
    then reads it row by row, skips what is blank and names the line of what is bad.
    """
    head, _, rows = text.partition("\n")  # without quotes, CRs or NULs, the csv module's header record is head
    if any(char in head for char in '"\r\0') or not rows.strip("\n") or not _PLAIN_ROWS.fullmatch(rows):
        return None
    header = [name.strip() for name in head.split(",")]
    if any(header.count(c) != 1 for c in columns):
        return None
    lines = rows.split("\n")
    if rows.count(",") != (len(header) - 1) * (len(lines) - lines.count("")):  # a row of more (or fewer) fields
        return None
    used = sorted({header.index(c) for c in columns})
    try:
        values = np.loadtxt(io.StringIO(rows), delimiter=",", comments=None, usecols=used, ndmin=2)
    except ValueError:  # an empty field, a short row, a malformed number
        return None
    table = {c: np.ascontiguousarray(values[:, used.index(header.index(c))]) for c in columns}
    if any(_out_of_range(table[c], c == arrival_column).any() for c in columns):
        return None
    return table


def _read_csv(path: Path, text: str, columns: list[str]) -> tuple[dict, list[int], dict[str, str]]:
    """(values per column as text or numbers, the line of each row, how to name each column in messages)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [name.strip() for name in next(reader, [])]
        _check_columns(path, columns, header)
        _check_unique(path, columns, header)
        index = {c: header.index(c) for c in columns}
        values: dict[str, list] = {c: [] for c in columns}
        lines = []
        for row in reader:
            if not any(field.strip() for field in row):
                continue  # a blank line
            if len(row) > len(header):  # an unquoted comma shifts every field after it: which is which?
                raise WorkloadError(
                    f"trace file {path}: line {reader.line_num}: {len(row)} fields, the header names"
                    f" {len(header)} (a comma inside a field must be quoted)"
                )
            for c, i in index.items():
                if i >= len(row):
                    raise WorkloadError(
                        f"trace file {path}: line {reader.line_num}: {len(row)} fields, no column {i + 1} ({c!r})"
                    )
                values[c].append(row[i])
            lines.append(reader.line_num)
    except csv.Error as e:
        raise WorkloadError(f"trace file {path}: line {reader.line_num}: not CSV ({e})") from None
    return values, lines, {c: f"column {i + 1} ({c!r})" for c, i in index.items()}


def _read_jsonl(path: Path, text: str, columns: list[str]) -> tuple[dict, list[int], dict[str, str]]:
    values: dict[str, list] = {c: [] for c in columns}
    lines = []
    present: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=unique_keys)
        except DuplicateKeyError as e:
            raise WorkloadError(f"trace file {path}: line {number}: key {e.key!r} appears twice") from None
        except json.JSONDecodeError as e:
            raise WorkloadError(f"trace file {path}: line {number}, column {e.colno}: not JSON ({e.msg})") from None
        except (ValueError, RecursionError) as e:  # a 5,000-digit number, or nesting deeper than Python reads
            raise WorkloadError(f"trace file {path}: line {number}: not a JSON object of numbers ({e})") from None
        if not isinstance(record, dict):
            raise WorkloadError(f"trace file {path}: line {number}: expected a JSON object, found {_json_kind(record)}")
        if present is None:
            present = list(record)
            _check_columns(path, columns, present)
        for c in columns:
            if c not in record:
                raise WorkloadError(f"trace file {path}: line {number}: no key {c!r}")
            values[c].append(record[c])
        lines.append(number)
    if present is None:
        _check_columns(path, columns, [])
    return values, lines, {c: f"key {c!r}" for c in columns}


def _json_kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number"
    )


def _check_values(
    path: Path, column: str, raw: list, lines: list[int], where: str, is_time: bool, text_numbers: bool
) -> np.ndarray:
    """Text (a CSV's fields: text_numbers) or JSON values -> float64, or a WorkloadError at the first that is not
    a number in range (a token count: a whole number; a JSON string is no number)."""
    out = np.empty(len(raw), dtype=np.float64)
    for k, value in enumerate(raw):
        if isinstance(value, str) and text_numbers:
            try:
                out[k] = float(value.strip())
                continue
            except ValueError:
                pass
        elif isinstance(value, int | float) and not isinstance(value, bool):
            try:
                out[k] = float(value)
                continue
            except OverflowError:  # an integer too large for a float
                pass
        raise WorkloadError(
            f"trace file {path}: line {lines[k]}, {where}: {_show(value)} is not a number"
            f" ({'seconds' if is_time else 'a token count'})"
        )
    bad = _out_of_range(out, is_time)
    if bad.any():
        k = int(np.argmax(bad))
        lo, hi, _ = _bounds(is_time)
        allowed = (
            f"a finite number of seconds in [{lo:g}, {hi:g}]" if is_time else f"a whole number of tokens in [0, {hi:,}]"
        )
        raise WorkloadError(f"trace file {path}: line {lines[k]}, {where}: {_show(raw[k])}: must be {allowed}")
    return out


def _bounds(is_time: bool) -> tuple[float, float, str]:
    return (-MAX_TRACE_SECONDS, MAX_TRACE_SECONDS, "seconds") if is_time else (0, MAX_TRACE_TOKENS, "tokens")


def _out_of_range(values: np.ndarray, is_time: bool) -> np.ndarray:
    """Values outside their bounds, and token counts that are not whole (10.7 was rounded to 11 silently)."""
    lo, hi, _ = _bounds(is_time)
    bad = ~np.isfinite(values) | (values < lo) | (values > hi)
    return bad if is_time else bad | (values != np.floor(values))


def _show(value: object) -> str:
    text = json.dumps(value) if isinstance(value, str | bool | type(None)) else _json_kind(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = f"{value:g}" if isinstance(value, float) or abs(value) < 10**20 else "a number of > 20 digits"
    return text if len(text) <= 40 else text[:37] + "..."


def _check_unique(path: Path, wanted: list[str], header: list[str]) -> None:
    for column in wanted:
        if header.count(column) > 1:
            positions = [str(i + 1) for i, name in enumerate(header) if name == column]
            raise WorkloadError(
                f"trace file {path}: column {column!r} appears {len(positions)} times in the header (columns"
                f" {', '.join(positions)}): which one to read? rename the others"
            )


def _check_columns(path: Path, wanted: list[str], present: list[str]) -> None:
    for column in wanted:
        if column not in present:
            raise WorkloadError(f"trace file {path} has no column {column!r} (its columns: {', '.join(present)})")
