"""The plots of a long run, drawn by child processes that start with the run.

Drawing the three PNGs costs about 1.4 s of CPU whatever the run's length (text layout and Agg rendering;
the data are binned to a few hundred points first), after 0.7 s to import matplotlib: as much as a
10,000-request simulation. `planner simulate --out` on a workload of BACKGROUND_MIN_REQUESTS or more therefore
deals the figures out to groups, one per CPU, at most one per figure, and starts plotting before the run: the
groups' process(es) import matplotlib while the parent simulates, then wait for the run's data and draw every
group at once, one process each, while the parent writes the CSV files. (One per CPU, not one per CPU beyond
the run's: the imports fit beside the run on the spare CPUs, and then every CPU draws; on 2 CPUs, 2 processes
took 0.91x the wall time of 1, median of 5 paired runs on the 10k benchmark.) With no idle CPU (one CPU, or
every CPU busy with other work: `idle_cpus`), or on a shorter run, the figures are drawn in-process: there the
processes' own start-up and imports would cost more than they hide. What they save where a CPU is idle: on the
10k benchmark the parent's own CPU time is about half of drawing in-process (5.3-6.5 s against 10.4-12.9 s on a
machine slowed by other work, 4 runs each), and that half is what a spare CPU takes off the wall time. They run at a
lower priority than the parent (NICENESS): with fewer spare CPUs than processes, their imports would
otherwise slow the simulation they wait for (8 alternating runs of `simulate --out` on the 10k benchmark, 2
CPUs: median 4.21 s against 4.92 s at the parent's priority). The figures are the same files as drawn
in-process (tests/test_plot_workers.py compares the bytes).

The run's data reach the processes through one temporary file that each of them reads, not through their
pipes: a pipe carries 64 kB at a time and waits for a reader running below the parent's priority, which made
the parent wait about 1 s to hand the 10k benchmark's 8 MB to each process (`send`, 3 runs: 0.83 to 1.16 s),
where writing the file takes hundredths of a second.

The plotting process is spawned, not forked from the parent: it starts from a clean interpreter (forking a
process with native threads, as numpy's BLAS has, can deadlock, and Python 3.12 warns of it); its start-up
(~0.3 s of CPU) is the price. On Linux one process imports matplotlib for every figure and, once the run's
data are there, forks a helper per group of figures but its first (numpy's BLAS pool is kept off in it, so
the fork copies one thread): on 2 CPUs the 10k benchmark's `simulate --out` then took 0.87x the CPU of one
spawned process per group (the second import and interpreter gone) and 0.97x the wall time, medians of 8
alternating pairs (wall 0.85x to 1.11x: the imports had mostly run beside the simulation already). Elsewhere
each group has a spawned process of its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from planner.outputs.plots import PLOT_NAMES

if TYPE_CHECKING:
    import multiprocessing.process
    from multiprocessing.connection import Connection

BACKGROUND_MIN_REQUESTS = 2000
NICENESS = 10  # a plotting process's, added to the parent's (Unix; ignored elsewhere)
# Forking a helper from a plotting process that has imported matplotlib costs milliseconds, where spawning one
# more process costs an interpreter's start-up and a matplotlib import of its own (about 1 s of CPU). Linux only:
# macOS's system libraries are not safe to use in a forked child, and Windows has no fork.
FORK_HELPERS = sys.platform.startswith("linux")
# Read by numpy's BLAS libraries (OpenBLAS, MKL, OpenMP builds) when numpy is imported: one thread, no pool.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class PlotWorkers:
    """The plotting processes, importing matplotlib from the start; send() hands them the run. Where a process
    can fork (FORK_HELPERS) one process takes every group of figures and forks a helper per group but its first
    when the run arrives; elsewhere one spawned process per group."""

    def __init__(self, groups: list[tuple[str, ...]]) -> None:
        import multiprocessing  # here: only a long run with --out needs it (~13 ms to import, -X importtime)

        context = multiprocessing.get_context("spawn")
        self.workers: list[tuple[Connection, multiprocessing.process.BaseProcess]] = []
        self.run_file: Path | None = None  # the run's data, once sent
        for process_groups in [groups] if FORK_HELPERS else [[names] for names in groups]:
            ours, theirs = context.Pipe()
            process = context.Process(target=_draw_when_told, args=(theirs, process_groups), daemon=True)
            process.start()
            theirs.close()
            self.workers.append((ours, process))

    def send(self, out_dir: Path, *args, **kwargs) -> None:
        """Start write_plots(out_dir, *args, **kwargs), each process its figures."""
        import pickle
        import tempfile

        handle, name = tempfile.mkstemp(prefix="planner-plots-", suffix=".pickle")
        self.run_file = Path(name)
        with os.fdopen(handle, "wb") as f:
            pickle.dump((out_dir, args, kwargs), f, protocol=pickle.HIGHEST_PROTOCOL)
        for connection, _ in self.workers:
            connection.send(self.run_file)

    def collect(self) -> list[Path]:
        """The figures' paths once every process has drawn its own, in PLOT_NAMES order."""
        order = {name: i for i, name in enumerate(PLOT_NAMES)}
        written, failures = [], []
        for connection, process in self.workers:
            outcome, value = receive(connection, process, "a plotting process")
            process.join()
            if outcome == "ok":
                written += value
            else:
                failures.append((outcome, value))
        self.workers = []
        self._remove_run_file()
        for outcome, value in failures:
            raise_failure(outcome, value, "drawing the plots")
        return sorted(written, key=lambda path: order[path.name])

    def close(self) -> None:
        """End the processes that were never given a run (the run failed): their pipe closes, they exit."""
        for connection, process in self.workers:
            connection.close()
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join()  # reaped: no process of ours outlives the command, not even as a zombie
        self.workers = []
        self._remove_run_file()

    def _remove_run_file(self) -> None:
        if self.run_file is not None:
            self.run_file.unlink(missing_ok=True)
            self.run_file = None


def _draw_when_told(connection: Connection, groups: list[tuple[str, ...]]) -> None:
    import signal  # here, not at the top: only a plotting process needs it

    # Ctrl-C reaches the whole process group: the parent handles it (exit 130, no traceback) and ends us by
    # closing our pipe, so we print nothing of our own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Below the parent's priority: on a machine with fewer spare CPUs than plotting processes, their imports
    # would otherwise take CPU from the simulation they wait for.
    if hasattr(os, "nice"):
        os.nice(NICENESS)
    if len(groups) > 1:
        # This process forks its helpers: no BLAS thread pool may be running in it then (a fork copies only the
        # forking thread, and a pool's locks with it). Drawing does no linear algebra.
        os.environ.update(dict.fromkeys(BLAS_THREAD_VARIABLES, "1"))
    import pickle
    from functools import partial

    from planner.outputs.plots.draw import write_plots  # the slow import, done while the parent runs

    try:
        run_file = connection.recv()
    except EOFError:
        return  # no run to draw

    def draw() -> list[Path]:
        with open(run_file, "rb") as f:
            out_dir, args, kwargs = pickle.load(f)
        helpers = [_fork(partial(write_plots, out_dir, *args, names=names, **kwargs)) for names in groups[1:]]
        try:
            written = write_plots(out_dir, *args, names=groups[0], **kwargs)
        finally:
            answers = [_helper_answer(*helper) for helper in helpers]  # waited for even when our own failed
        for outcome, value in answers:
            if outcome != "ok":
                raise_failure(outcome, value, "drawing in a plotting helper")
            written += value
        return written

    answer(connection, draw)


def _fork(work: Callable[[], list[Path]]) -> tuple[int, Connection]:
    """A forked helper that runs work and answers (answer, below) over a pipe: (its pid, our end)."""
    from multiprocessing import Pipe

    ours, theirs = Pipe(duplex=False)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the helper: answer, then leave without running the parent's exit handlers
        status = 1
        try:
            _end_with(parent)
            ours.close()
            answer(theirs, work)
            status = 0
        finally:
            os._exit(status)
    theirs.close()
    return pid, ours


def _end_with(parent: int) -> None:
    """Have the kernel kill this process when the process that forked it ends (Linux's PR_SET_PDEATHSIG): the
    planner ends a plotting process that it no longer waits for (a failed run, Ctrl-C) by terminating it, and
    its helpers must not go on drawing into the folder."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1  # <linux/prctl.h>
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the request took effect
        os._exit(1)


def _helper_answer(pid: int, connection: Connection) -> tuple[str, Any]:
    """A forked helper's answer once it has exited; one that died before answering, as an error."""
    try:
        outcome = connection.recv()
    except EOFError:
        outcome = None
    connection.close()
    _, status = os.waitpid(pid, 0)
    if outcome is None:
        return "error", f"a plotting helper ended with exit code {os.waitstatus_to_exitcode(status)}"
    return outcome


def plot_workers_for(num_requests: int, out_dir: Path | None) -> PlotWorkers | None:
    """PlotWorkers when a run of num_requests writes plots into out_dir, is long enough to gain and has a CPU
    that nothing else keeps busy (one process per idle CPU, the run's own included)."""
    if out_dir is None or num_requests < BACKGROUND_MIN_REQUESTS:
        return None
    idle = idle_cpus()
    groups = figure_groups(idle if idle > 1 else 0)
    if not groups:
        return None
    try:
        return PlotWorkers(groups)
    except OSError:  # no process to be had (a limit on them): the same figures, drawn in-process
        return None


def figure_groups(num_workers: int) -> list[tuple[str, ...]]:
    """PLOT_NAMES dealt out to at most num_workers processes (none: []), balanced by what they cost to draw
    (the 10k benchmark run, this repository's machine, CPU seconds in one process once its fonts are loaded):
    the latency figure, four CDF panels, 0.71 s; throughput 0.53 s; KV cache 0.40 s. So with two processes the
    latency figure has one to itself (paired runs: 0.96x the wall time of dealing the figures round-robin,
    median of 5)."""
    num_workers = min(max(num_workers, 0), len(PLOT_NAMES))
    if num_workers < 2:
        return [PLOT_NAMES] if num_workers else []
    dearest, rest = PLOT_NAMES[0], PLOT_NAMES[1:]
    return [(dearest,), *(rest[i :: num_workers - 1] for i in range(num_workers - 1))]


def idle_cpus() -> int:
    """The CPUs this process may run on less what other work keeps busy (the 1-minute load average, where the OS
    keeps one). On a machine with none to spare, plotting processes only take CPU from the run they wait for:
    on 2 CPUs at a load of 5 to 9, `simulate --out` on the 10k benchmark took 1.28x the wall time with them
    (median of 8 alternating pairs)."""
    cpus = usable_cpus()
    if not hasattr(os, "getloadavg"):
        return cpus
    return max(0, int(cpus - os.getloadavg()[0]))


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS has one, as under a container's limit)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# How a plotting process (and each helper it forks) answers over its pipe: the work's result, or its error, which
# the parent raises as its own.


def answer(connection: Connection, work: Callable[[], Any]) -> None:
    """In the child: send ("ok", work()); an OSError (a full disk, a folder changed meanwhile) as
    ("oserror", its text), any other error (a bug) as ("error", its traceback)."""
    import traceback  # here: only a child needs it

    try:
        connection.send(("ok", work()))
    except OSError as e:
        connection.send(("oserror", str(e)))
    except Exception:  # noqa: BLE001 -- any bug: the parent raises it with this traceback
        connection.send(("error", traceback.format_exc()))


def receive(connection: Connection, process: multiprocessing.process.BaseProcess, who: str) -> tuple[str, Any]:
    """In the parent: the child's answer; a child that died before it could answer (killed, out of memory) as
    an error."""
    try:
        return connection.recv()
    except EOFError:
        return "error", f"{who} ended with exit code {process.exitcode}"


def raise_failure(outcome: str, value: Any, doing: str) -> NoReturn:
    """Raise a child's failed answer: an OSError as one (write_outputs makes it a PlannerError), anything else
    as a RuntimeError carrying the child's traceback."""
    if outcome == "oserror":
        raise OSError(value)
    raise RuntimeError(f"{doing} failed:\n{value}")
