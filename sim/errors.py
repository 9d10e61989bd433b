"""The workload's input error, in a module of its own: the CLI catches it without importing numpy."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload that its files cannot supply: a missing trace file or column, an unreadable row."""
