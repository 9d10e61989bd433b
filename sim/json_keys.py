"""JSON objects with unique keys: a file that gives a key twice is refused, not read as its last value."""

from __future__ import annotations


class DuplicateKeyError(ValueError):
    """A JSON object gives `key` more than once."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r} appears twice in one object")
        self.key = key


def unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """json.loads' object_pairs_hook: the object as a dict, or DuplicateKeyError (json.loads itself keeps the
    last value of a repeated key, silently)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj
