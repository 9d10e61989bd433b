"""The simulator's input errors, in a module of their own: the CLI catches them without importing numpy."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload that its files cannot supply: a missing trace file or column, an unreadable row."""


class StepTimeError(WorkloadError):
    """A GPU spec or coefficients under which a step takes no finite time (a rate of ~0, an overhead of 1e308).
    The scenario and profile checks bound both far outside any real device first; this is the last defence,
    before the simulator's statistics meet an inf or NaN. A WorkloadError: the CLI reports it as one line."""
