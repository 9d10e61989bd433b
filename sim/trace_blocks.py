"""Reading a trace's prompt block ids (prefix identity): each JSON Lines row's list of block ids, checked.

Mooncake's traces (FAST'25, `FAST25-release/traces/`) give each request `hash_ids`: its prompt in blocks of 512
tokens, each id standing for the block's content and every block before it (a chained hash, remapped to small
integers), the last block possibly partial. Two rows whose first k ids agree share their first k * 512 prompt
tokens. Every id is checked (a whole number, not negative) and so is each row's count against its prompt length
(ceil(length / block_tokens) ids); a bad one is a WorkloadError naming the file, the line and the key.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from sim.errors import WorkloadError

MAX_BLOCK_ID = (1 << 63) - 1  # int64, as every other id here


def read_block_ids(path: str | Path, column: str, length_column: str, block_tokens: int) -> tuple[tuple[int, ...], ...]:
    """Each row's block ids, in file order (the rows read_trace returns, blank lines skipped alike).

    `length_column` holds the row's prompt length: its ids must number ceil(length / block_tokens). read_trace
    has checked that column (and the file) before.
    """
    path = Path(path)
    stat = path.stat()
    version = (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return _read_block_ids(path, column, length_column, block_tokens, version)


@lru_cache(maxsize=2)
def _read_block_ids(
    path: Path, column: str, length_column: str, block_tokens: int, version: tuple[int, ...]
) -> tuple[tuple[int, ...], ...]:
    """read_block_ids' work; `version` (the file's identity, mtime and size) only keys the cache."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)  # read_trace has read every line as a JSON object with unique keys
        where = f"trace file {path}: line {number}, key {column!r}"
        if column not in record:
            raise WorkloadError(f"trace file {path}: line {number}: no key {column!r} (the prompt's block ids)")
        ids = record[column]
        if not isinstance(ids, list) or not all(_is_block_id(i) for i in ids):
            raise WorkloadError(f"{where}: {_first_bad(ids)}: block ids must be a list of whole numbers >= 0")
        length = int(record[length_column])
        expected = -(-length // block_tokens)
        if len(ids) != expected:
            raise WorkloadError(
                f"{where}: {len(ids)} block ids for {length_column} {length}, which is {expected} blocks of"
                f" {block_tokens} tokens (workload.trace.block_tokens): ids and length contradict each other"
            )
        rows.append(tuple(ids))
    return tuple(rows)


def _is_block_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_BLOCK_ID


def _first_bad(ids: object) -> str:
    if not isinstance(ids, list):
        return f"{json.dumps(ids)[:40]} is not a list"
    k, value = next((k, v) for k, v in enumerate(ids) if not _is_block_id(v))
    return f"id {k} is {json.dumps(value)[:40]}"
