"""Paths the user names (a command's path arguments, and the paths inside a scenario), checked against what the
file system can take before anything opens them: a name longer than the file system allows, or a whole path
longer than the system allows, is one message naming where the path came from. Otherwise the first open() that
met it raised OSError ENAMETOOLONG, a traceback from deep inside whichever command it was."""

from __future__ import annotations

import os
from pathlib import Path

# POSIX's own minimums are far lower; these are Linux's (ext4, xfs, btrfs, tmpfs) and macOS's name limit, used
# where the file system cannot be asked.
DEFAULT_NAME_MAX = 255  # bytes in one name
DEFAULT_PATH_MAX = 4096  # bytes in a path, its terminating NUL included
SHOWN_CHARS = 48  # of a long path, in a message: its start and end
# A folder the commands write or read files in (--out, --model-path, --from, a run to compare): room for a name
# this long inside it (the longest they use: model.safetensors.index.json, latency_vs_load.png, .planner.lock).
NAME_INSIDE_BYTES = 32


def _limits(path: str) -> tuple[int, int]:
    """(NAME_MAX, PATH_MAX) of the file system the path would be on: asked of its nearest existing folder."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            return os.pathconf(folder, "PC_NAME_MAX"), os.pathconf(folder, "PC_PATH_MAX")
        except (OSError, ValueError):  # not there (yet), not a folder, itself too long, or no such limit here
            parent = os.path.dirname(folder)
            if parent == folder:
                return DEFAULT_NAME_MAX, DEFAULT_PATH_MAX
            folder = parent


def shown(path: str) -> str:
    """The path as a message shows it: whole when short, else its start and end around an ellipsis."""
    if len(path) <= SHOWN_CHARS:
        return path
    return f"{path[: SHOWN_CHARS // 2]}...{path[-SHOWN_CHARS // 2 :]} ({len(path):,} characters)"


def too_long(path: str | Path, folder: bool = False) -> str | None:
    """Why the file system cannot take this path, or None. The whole path is measured as the commands open it
    (made absolute against the current folder), each name as given; both in the bytes the OS is handed.
    `folder`: the commands open files in it, so a name of NAME_INSIDE_BYTES must fit inside too."""
    text = os.fspath(path)
    name_max, path_max = _limits(text)
    longest = max(os.fsencode(text).split(b"/"), key=len)
    if len(longest) > name_max:
        return f"a name in it is {len(longest):,} bytes long; this file system takes at most {name_max:,} per name"
    whole = len(os.fsencode(os.path.abspath(text)))
    if whole >= path_max:
        return f"it is {whole:,} bytes long as an absolute path; this system takes at most {path_max - 1:,}"
    if folder and whole + 1 + NAME_INSIDE_BYTES >= path_max:
        return (
            f"it is {whole:,} bytes long as an absolute path, which leaves no room for the files in it (names up"
            f" to {NAME_INSIDE_BYTES} bytes) within the {path_max - 1:,} this system takes"
        )
    return None
