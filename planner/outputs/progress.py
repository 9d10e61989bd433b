"""A one-line progress bar on stderr for the commands' long loops (a terminal only; nothing in a pipe or a log)."""

from __future__ import annotations

import sys
import time

BAR_WIDTH = 30  # characters


class ProgressBar:
    """`label [####......] done/total unit Ns`, redrawn in place, shown once the work has taken delay_s (a
    quick run prints nothing); call close() after the last update."""

    def __init__(self, label: str, unit: str, delay_s: float) -> None:
        self.label, self.unit, self.delay_s = label, unit, delay_s
        self.start = time.perf_counter()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.perf_counter() - self.start
        if elapsed < self.delay_s or not sys.stderr.isatty():
            return
        self.shown = True
        filled = int(BAR_WIDTH * done / max(total, 1))
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        print(
            f"\r{self.label} [{bar}] {done:,}/{total:,} {self.unit} {elapsed:.0f}s", end="", file=sys.stderr, flush=True
        )

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr)
