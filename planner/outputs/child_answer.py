"""How the child processes of `planner simulate --out` (planner.outputs.plot_workers, planner.outputs.steps_writer) answer their
parent over a pipe: the work's result, or its error, which the parent raises as its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import multiprocessing.process
    from multiprocessing.connection import Connection


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
