"""The page's Markdown: a percentage cell and a table."""

from __future__ import annotations


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out
