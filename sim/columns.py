"""A table of typed numpy columns that grows as rows are appended: the recorder's step and request rows."""

from __future__ import annotations

import numpy as np


class Columns:
    """A table of typed numpy columns that grows by doubling."""

    def __init__(self, dtypes: dict[str, type], capacity: int = 1024) -> None:
        self.size = 0
        self.data = {name: np.empty(capacity, dtype) for name, dtype in dtypes.items()}

    def _grow(self, needed: int) -> None:
        capacity = len(next(iter(self.data.values())))
        if needed > capacity:
            capacity = max(needed, 2 * capacity)
            for name, column in self.data.items():
                grown = np.empty(capacity, column.dtype)
                grown[: self.size] = column[: self.size]
                self.data[name] = grown

    def append(self, **row: float) -> None:
        self._grow(self.size + 1)
        for name, value in row.items():
            self.data[name][self.size] = value
        self.size += 1

    def extend(self, **rows: np.ndarray | float) -> None:
        """Append len(the first array) rows; scalars are broadcast."""
        n = next(len(v) for v in rows.values() if isinstance(v, np.ndarray))
        self._grow(self.size + n)
        for name, value in rows.items():
            self.data[name][self.size : self.size + n] = value
        self.size += n

    def view(self) -> dict[str, np.ndarray]:
        return {name: column[: self.size] for name, column in self.data.items()}

    def keep_every_other(self) -> None:
        for column in self.data.values():
            kept = column[: self.size : 2].copy()
            column[: len(kept)] = kept
        self.size = (self.size + 1) // 2
