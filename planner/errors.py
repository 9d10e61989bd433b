"""Errors the user caused and can fix: the CLI prints their message as one line and exits 2, no traceback.

Anything else that escapes is a bug in `planner` and keeps its traceback.
"""

from __future__ import annotations

import json
from typing import Any


class PlannerError(Exception):
    """A user-facing error; `str(err)` is the whole message."""


# Marks "no value to show" (a missing key, or a problem that is not about one value).
NO_VALUE: Any = object()


def show_value(value: Any, limit: int = 80) -> str:
    """A value as the user would write it in YAML (`true`, `null`, `"a10"`), cut short if long."""
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):  # circular or odd objects: a plain repr still tells the user enough
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
