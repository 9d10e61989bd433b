"""The catalog's one error type: a bad catalog entry, GPU mapping or config.json."""

from __future__ import annotations

from planner.errors import PlannerError


class CatalogError(PlannerError, ValueError):
    """A bad catalog entry, GPU mapping or config.json. A ValueError for callers that catch those, and a
    PlannerError so the CLI prints it as one line."""
