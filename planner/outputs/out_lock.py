"""One planner process at a time writes an --out folder: the outputs of two would interleave (a summary of one
run beside the requests of another, NUL bytes in steps.csv), and both would exit 0."""

from __future__ import annotations

import os
from pathlib import Path

from planner.errors import PlannerError

LOCK_NAME = ".planner.lock"  # hidden: not an output; removed when the command that holds it ends
_locks: dict[Path, int] = {}  # lock file -> the descriptor whose flock this process holds


def lock_out_dir(out_dir: Path) -> None:
    """Hold an flock on out_dir's LOCK_NAME until the command ends (release_out_dirs, from planner.cli.main: a
    command's children writing steps.csv or plots end before it returns) or else the process, so that a second
    planner process writing the same folder is refused rather than interleave its files with ours. An flock dies
    with its process: a crash leaves no stale lock."""
    try:
        import fcntl
    except ImportError:  # Windows has no flock: two runs into one folder are not caught there
        return
    lock = (out_dir / LOCK_NAME).resolve()
    if lock in _locks:  # this process already holds it (the tests run several commands in one process)
        return
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise PlannerError(f"--out {out_dir}: cannot create {LOCK_NAME}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise PlannerError(
                f"--out {out_dir}: another planner process (pid {pid}) is writing there; wait for it or choose"
                " another --out"
            ) from None
        if _same_file(lock, fd):
            break
        os.close(fd)  # its holder removed it between our open and our flock: lock the one there now
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    if not _locks:
        import atexit

        atexit.register(release_out_dirs)
    _locks[lock] = fd


def _same_file(path: Path, fd: int) -> bool:
    try:
        return os.path.samestat(os.stat(path), os.fstat(fd))
    except FileNotFoundError:
        return False


def release_out_dirs() -> None:
    """Remove the lock files, each while still locked: a process that opened one meanwhile finds, once it has
    the flock, that the name no longer is that file (_same_file), and opens it again."""
    for lock, fd in _locks.items():
        try:
            lock.unlink()
        except OSError:  # the folder was removed or made read-only meanwhile: the flock ends with us anyway
            pass
        os.close(fd)
    _locks.clear()
