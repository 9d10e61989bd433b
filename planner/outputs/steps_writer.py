"""steps.csv formatted by a child process while the parent simulates.

Formatting the step rows as text costs about 0.4 us a field in CPython (`%` formatting, which np.savetxt also
does per row): on the 10k benchmark, 45,134 merged rows of 18 fields plus merging the decode runs, 0.40 billion
instructions of the parent's 0.69 billion more than `--json` at 2,000 requests (callgrind, plots not
counted). `planner simulate --out` on a run long enough for plotting processes (planner.outputs.plot_workers: the same
rule) hands each chunk of step rows to a process that merges and writes them (planner.outputs.results.StepsCsv, the
same bytes), so that work runs on another CPU beside the simulation. The chunks are copies (the recorder
reuses its buffer) in a queue of at most QUEUE_CHUNKS: a writer that falls behind holds the parent back
rather than let the copies pile up in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from planner.outputs.child_answer import answer, raise_failure, receive
from planner.outputs.plot_workers import BACKGROUND_MIN_REQUESTS, usable_cpus

if TYPE_CHECKING:
    import multiprocessing.process
    import multiprocessing.queues
    from multiprocessing.connection import Connection

QUEUE_CHUNKS = 4  # chunks of STEP_CHUNK_ROWS rows (about 6 MB each) waiting for the writer, at most


class StepsCsvWriter:
    """The recorder's steps_sink: each chunk of step rows goes to a spawned process that writes steps.csv."""

    def __init__(self, path: Path, all_steps: bool = False) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # as the plotting processes: planner.outputs.plot_workers
        self.queue: multiprocessing.queues.Queue = context.Queue(QUEUE_CHUNKS)
        self.connection: Connection
        self.connection, theirs = context.Pipe()
        self.process: multiprocessing.process.BaseProcess = context.Process(
            target=_write_steps, args=(path, all_steps, self.queue, theirs), daemon=True
        )
        self.process.start()
        theirs.close()

    def __call__(self, rows: dict[str, np.ndarray]) -> None:
        self._put({name: column.copy() for name, column in rows.items()})

    def close(self) -> None:
        """Wait until steps.csv is written; an error in the writer is raised here (OSError: a full disk)."""
        self._put(None)
        self._outcome()
        self.process.join()

    def _put(self, item: dict[str, np.ndarray] | None) -> None:
        """Queue a chunk (None: the end), waiting while the queue is full, unless the writer has stopped."""
        import queue

        while True:
            try:
                self.queue.put(item, timeout=1.0)
                return
            except queue.Full:
                if self.connection.poll() or not self.process.is_alive():
                    self._outcome()  # it stopped without the end: its error

    def _outcome(self) -> None:
        """The writer's answer: nothing when it wrote the file, else raise its error."""
        outcome, value = receive(self.connection, self.process, "the steps.csv writer")
        if outcome != "ok":
            self.abort()
            raise_failure(outcome, value, "writing steps.csv")

    def abort(self) -> None:
        """End the writer without waiting for what it was given (a failed run, or a failed writer)."""
        self.queue.cancel_join_thread()  # chunks nobody will read must not keep this process from exiting
        self.queue.close()
        self.connection.close()
        self.process.terminate()  # it may be waiting for a chunk that will not come (no-op once it ended)
        self.process.join()


def _write_steps(path: Path, all_steps: bool, queue: multiprocessing.queues.Queue, connection: Connection) -> None:
    import multiprocessing  # these here: only the writer needs them
    import signal
    from queue import Empty

    from planner.outputs.results import StepsCsv

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends us
    parent = multiprocessing.parent_process()

    def write() -> None:
        steps_csv = StepsCsv(path, all_steps)
        while True:
            try:
                rows = queue.get(timeout=1.0)
            except Empty:  # the queue never closes for us (we hold its writing end too): is the parent gone?
                if parent is not None and not parent.is_alive():
                    raise SystemExit(0) from None  # nobody to answer
                continue
            if rows is None:
                break
            steps_csv(rows)
        steps_csv.close()

    answer(connection, write)


def steps_csv_for(path: Path, all_steps: bool, num_requests: int):
    """The sink that writes steps.csv: in a child process on a long run with a CPU to spare, else in-process."""
    from planner.outputs.results import StepsCsv

    if num_requests < BACKGROUND_MIN_REQUESTS or usable_cpus() < 2:
        return StepsCsv(path, all_steps)
    try:
        return StepsCsvWriter(path, all_steps)
    except OSError:  # no process to be had (a limit on them): written in-process
        return StepsCsv(path, all_steps)
