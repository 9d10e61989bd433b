"""The plots of a long run, drawn by child processes that start with the run.

Drawing the three PNGs costs about 2 s of CPU whatever the run's length (matplotlib's import, text layout
and Agg rendering; the data are binned to a few hundred points first), which is half again a 10,000-request
simulation. `planner simulate --out` on a workload of BACKGROUND_MIN_REQUESTS or more therefore starts one
process per figure before the run: each imports matplotlib while the parent simulates (on another core where
there is one), then waits for the run's data and draws its figure while the parent writes the CSV files.
The figures are the same files as drawn in-process (tests/test_plot_workers.py compares the bytes). Shorter
runs draw in-process: there the processes' own start-up would cost more than it hides.

Processes are spawned, not forked, so a child starts from a clean interpreter on every platform.
"""

from __future__ import annotations

import multiprocessing
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

BACKGROUND_MIN_REQUESTS = 2000
# Here, not in planner.plots, so the parent process needs no matplotlib to name the figures or sample the ITLs.
PLOT_NAMES = ("latency_cdf.png", "throughput.png", "kv_cache.png")
CDF_POINTS = 200_000  # a CDF curve draws at most this many values (percentiles stay exact)


class PlotWorkers:
    """One spawned process per figure, importing matplotlib from the start; send() hands them the run."""

    def __init__(self, names: tuple[str, ...] = PLOT_NAMES) -> None:
        context = multiprocessing.get_context("spawn")
        self.workers: list[tuple[Connection, multiprocessing.process.BaseProcess]] = []
        for name in names:
            ours, theirs = context.Pipe()
            process = context.Process(target=_draw_when_told, args=(theirs, name), daemon=True)
            process.start()
            theirs.close()
            self.workers.append((ours, process))

    def send(self, out_dir: Path, *args, **kwargs) -> None:
        """Start write_plots(out_dir, *args, **kwargs), one figure per process."""
        for connection, _ in self.workers:
            connection.send((out_dir, args, kwargs))

    def collect(self) -> list[Path]:
        """The figures' paths once every process has drawn its own, in PLOT_NAMES order."""
        written, failures = [], []
        for connection, process in self.workers:
            try:
                outcome, value = connection.recv()
            except EOFError:  # the process died (killed, out of memory) before it could answer
                outcome, value = "error", f"a plotting process ended with exit code {process.exitcode}"
            process.join()
            if outcome == "ok":
                written += value
            else:
                failures.append((outcome, value))
        self.workers = []
        for outcome, value in failures:
            if outcome == "oserror":  # a full disk or a folder changed meanwhile: write_outputs' PlannerError
                raise OSError(value)
            raise RuntimeError(f"drawing the plots failed:\n{value}")
        return written

    def close(self) -> None:
        """End the processes that were never given a run (the run failed): their pipe closes, they exit."""
        for connection, process in self.workers:
            connection.close()
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
        self.workers = []


def _draw_when_told(connection: Connection, name: str) -> None:
    from planner.plots import write_plots  # the slow import, done while the parent runs

    try:
        out_dir, args, kwargs = connection.recv()
    except EOFError:
        return  # no run to draw
    try:
        connection.send(("ok", write_plots(out_dir, *args, names=(name,), **kwargs)))
    except OSError as e:
        connection.send(("oserror", str(e)))
    except Exception:  # noqa: BLE001 -- any bug: the parent raises it with this traceback
        connection.send(("error", traceback.format_exc()))


def plot_workers_for(num_requests: int, out_dir: Path | None) -> PlotWorkers | None:
    """PlotWorkers when a run of num_requests writes plots into out_dir and is long enough to gain."""
    if out_dir is None or num_requests < BACKGROUND_MIN_REQUESTS:
        return None
    try:
        return PlotWorkers()
    except OSError:  # no process to be had (a limit on them): the same figures, drawn in-process
        return None
