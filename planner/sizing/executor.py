"""Where a search's candidates run: in this process (one worker), over worker processes, or on a Ray
cluster. Each gives the search the same thing, a `submit(task) -> concurrent.futures.Future`."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor

from planner.errors import PlannerError

# Each worker process runs one simulation at a time on one core: beyond a few per core they only queue for
# the CPU, each costing a start-up and its memory (100,000 of them hang the machine starting).
WORKERS_PER_CPU = 4


def max_workers() -> int:
    return WORKERS_PER_CPU * (os.cpu_count() or 1)


class Executor:
    """`with Executor(evaluate, workers, ray_address) as submit:` submit(task) -> a concurrent.futures.Future."""

    def __init__(self, fn: Callable, workers: int, ray_address: str | None) -> None:
        self.fn, self.workers, self.ray_address, self.pool = fn, workers, ray_address, None

    def __enter__(self):
        if self.ray_address:
            return self._ray_submit()
        if self.workers <= 1:
            return self._inline
        self.pool = ProcessPoolExecutor(self.workers)
        return lambda task: self.pool.submit(self.fn, task)

    def _ray_submit(self):
        try:
            import ray
        except ImportError as e:
            raise PlannerError(f"--ray needs the ray extra (pip install 'planner[ray]'): {e}") from e
        if not ray.is_initialized():
            _check_reachable(self.ray_address)
            try:
                ray.init(address=self.ray_address, log_to_driver=False)
            except (ConnectionError, ValueError, RuntimeError) as err:
                raise PlannerError(f"--ray {self.ray_address}: cannot connect to a Ray cluster: {err}") from err
        remote = ray.remote(self.fn)
        return lambda task: remote.remote(task).future()

    def _inline(self, task) -> Future:
        fut: Future = Future()
        fut.set_result(self.fn(task))
        return fut

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def _check_reachable(address: str) -> None:
    """A host:port that nothing answers on: say so now (Ray itself retries for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local": Ray resolves them
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise PlannerError(
            f"--ray {address}: no Ray cluster answers there ({e}); start one with `ray start --head`"
        ) from None
