"""Errors the user caused and can fix: the CLI prints their message as one line and exits 2, no traceback.

Anything else that escapes is a bug in `planner` and keeps its traceback.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

EXIT_USAGE = 2  # the exit status of a user error (argparse's, for a bad command line, too)


class PlannerError(Exception):
    """A user-facing error; `str(err)` is the whole message."""


# Marks "no value to show" (a missing key, or a problem that is not about one value).
NO_VALUE: Any = object()


def show_value(value: Any, limit: int = 80) -> str:
    """A value as the user would write it in YAML (`true`, `null`, `"a10"`), cut short if long."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4,000'} digits"
    if isinstance(value, float) and not math.isfinite(value):
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan")  # YAML's spelling, not JSON's
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):  # circular, deep or odd objects: say what it is
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(message: str) -> str:
    """A message as printed: control characters (a newline or \\x1e in a key name, say) escaped, so it
    stays one line of plain text whatever the input held."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)


NO_SUCH_USER = "a path that starts with ~name names a user with no home folder on this machine"


def expand_user(value: str) -> Path | None:
    """Path(value) with a leading `~` or `~name` expanded, or None when `~name` is no user here (pathlib then
    raises RuntimeError: the caller names the field, the value and NO_SUCH_USER)."""
    try:
        return Path(value).expanduser()
    except RuntimeError:
        return None


def read_text_file(path: Path, what: str, max_bytes: int) -> str:
    """A small UTF-8 text file's contents, or a PlannerError saying why not: missing, a folder, not a regular
    file (a FIFO or a device would block or never end: checked before opening), too large, not UTF-8."""
    if not path.exists():
        raise PlannerError(f"{path}: no such {what}")
    if path.is_dir():
        raise PlannerError(f"{path}: is a folder, not a {what}")
    if not path.is_file():
        raise PlannerError(f"{path}: not a regular file (a FIFO, socket or device?); give a {what}")
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise PlannerError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise PlannerError(f"{path}: larger than {max_bytes:,} bytes: not a {what}")
    return decode_utf8(data, path)


def decode_utf8(data: bytes, path: Path | str) -> str:
    """UTF-8 bytes (a leading BOM allowed) -> text; else a PlannerError with the line and column of the bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            raise PlannerError(f"{path}: the file is UTF-16 text; save it as UTF-8") from None
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise PlannerError(
            f"{path}: line {line}, column {column}: byte 0x{data[e.start]:02x} is not UTF-8 text (a binary file?)"
        ) from None


class ScenarioError(PlannerError):
    """A bad scenario value: `scenarios/x.yaml: engine.gpu_memory_utilization = 1.5: must be in (0, 1]`.

    `file` and `key_path` say where, `value` what was found (NO_VALUE: nothing to show) and `allowed` what
    would be accepted, so the user can fix the file without reading our code.
    """

    def __init__(self, file: str, key_path: str, value: Any = NO_VALUE, allowed: str = "") -> None:
        self.file = file
        self.key_path = key_path
        self.value = value
        self.allowed = allowed
        where = f"{file}: {key_path}" if key_path else file
        if value is not NO_VALUE:
            where += f" = {show_value(value)}"
        super().__init__(f"{where}: {allowed}" if allowed else where)
