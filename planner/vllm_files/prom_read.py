"""Reading scrapes of vLLM's Prometheus `/metrics` (the text exposition format): histograms, counters, gauges and
`vllm:cache_config_info`, each checked; two scrapes of one server give the window between them.

Refused, naming the file and the series: a line that is not the format, a histogram whose cumulative buckets
fall or whose +Inf bucket is not its count, two scrapes of different servers (another model, or another
cache_config_info: block size, number of blocks), and a counter or histogram that went backwards between two
scrapes, or a process_start_time_seconds that changed (the server restarted: its counters began again at 0).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planner.errors import PlannerError, read_text_file
from planner.vllm_files.names import CACHE_CONFIG_INFO, START_TIME

MAX_SCRAPE_BYTES = 1 << 26
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)')

Series = tuple[str, tuple[tuple[str, str], ...]]  # metric name, its labels (sorted, `le` left out)


@dataclass
class Histogram:
    bounds: tuple[float, ...]  # the finite `le`s, rising
    cumulative: np.ndarray  # observations <= each bound
    count: float
    sum: float

    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass
class Scrape:
    """One scrape (or the window between two: `window`)."""

    path: Path
    histograms: dict[Series, Histogram] = field(default_factory=dict)
    counters: dict[Series, float] = field(default_factory=dict)
    gauges: dict[Series, float] = field(default_factory=dict)
    cache_config: dict[str, str] = field(default_factory=dict)  # vllm:cache_config_info's labels, engine 0's
    # When the window began and ended (Unix seconds): a scrape's end is its samples' timestamp (the text format's
    # optional third field, ms; None without one); a window's start is its first scrape's (one scrape alone has
    # none: its counters hold the server's whole life, and not how its traffic went over it).
    start_s: float | None = None
    end_s: float | None = None

    @property
    def window_s(self) -> float | None:
        if self.start_s is None or self.end_s is None:
            return None
        return self.end_s - self.start_s

    def models(self) -> set[str]:
        return {v for (_, labels) in [*self.histograms, *self.counters] for k, v in labels if k == "model_name"}

    def histogram(self, name: str) -> Histogram | None:
        """The metric's histogram summed over its series (engines), or None if the scrape has none."""
        parts = [h for (n, _), h in self.histograms.items() if n == name]
        if not parts or any(h.bounds != parts[0].bounds for h in parts):
            return parts[0] if parts else None
        return Histogram(
            parts[0].bounds, sum(h.cumulative for h in parts), sum(h.count for h in parts), sum(h.sum for h in parts)
        )

    def identity(self) -> tuple:
        """What two scrapes of one server share."""
        fixed = {k: v for k, v in self.cache_config.items()}
        return tuple(sorted(self.models())), tuple(sorted(fixed.items()))


def _labels(path: Path, number: int, text: str) -> dict[str, str]:
    out, at = {}, 0
    while at < len(text):
        match = _LABEL.match(text, at)
        if match is None:
            raise PlannerError(f"{path}: line {number}: labels {{{text[:40]}}}: not Prometheus text")
        out[match.group(1)] = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), match.group(2))
        at = match.end()
    return out


def _value(path: Path, number: int, name: str, text: str) -> float:
    try:
        return float(text)  # Python reads +Inf, -Inf and NaN as Prometheus writes them
    except ValueError:
        raise PlannerError(
            f"{path}: line {number}: {name} = {text[:40]!r}: not a number (is this a Prometheus /metrics scrape?)"
        ) from None


def read_scrape(path: Path) -> Scrape:
    """A scrape file, checked (the module's rules)."""
    text = read_text_file(path, "Prometheus /metrics scrape", MAX_SCRAPE_BYTES)
    kinds: dict[str, str] = {}
    buckets: dict[Series, dict[float, float]] = {}
    parts: dict[Series, dict[str, float]] = {}
    scrape = Scrape(path)
    stamps_ms: list[float] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("# TYPE "):
            fields = line.split()
            if len(fields) >= 4:
                kinds[fields[2]] = fields[3]
            continue
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise PlannerError(f"{path}: line {number}: {line[:40]!r}: not Prometheus text (name{{labels}} value)")
        name, labels = match.group(1), _labels(path, number, match.group(3) or "")
        value = _value(path, number, name, match.group(4))
        if match.group(5) is not None:
            stamps_ms.append(float(match.group(5)))
        le = labels.pop("le", None)
        key = (name, tuple(sorted(labels.items())))
        base = name.rsplit("_", 1)[0]
        if kinds.get(base) == "histogram" and name.endswith(("_bucket", "_count", "_sum")):
            series = (base, key[1])
            if name.endswith("_bucket"):
                if le is None:
                    raise PlannerError(f"{path}: line {number}: {name}: a bucket without its le label")
                buckets.setdefault(series, {})[_value(path, number, f"{name} le", le)] = value
            else:
                parts.setdefault(series, {})[name.rsplit("_", 1)[1]] = value
        elif name == CACHE_CONFIG_INFO:
            if labels.get("engine", "0") == "0":
                scrape.cache_config = labels
        elif name.endswith("_total") or kinds.get(name) == "counter":
            scrape.counters[key] = value
        else:
            scrape.gauges[key] = value
    for series, by_le in buckets.items():
        scrape.histograms[series] = _histogram(path, series, by_le, parts.get(series, {}))
    if stamps_ms:  # one scrape's samples share a time, give or take the scrape's own duration: its end
        scrape.end_s = max(stamps_ms) / 1e3
    if not scrape.histograms and not scrape.counters and not scrape.cache_config:
        raise PlannerError(f"{path}: no histogram, counter or cache_config_info: not a scrape of vLLM's /metrics")
    if not any(n.startswith("vllm:") for n, _ in [*scrape.histograms, *scrape.counters]):
        raise PlannerError(f"{path}: no vllm: metric: a /metrics scrape of another server, not vLLM's")
    return scrape


def _shown(series: Series) -> str:
    name, labels = series
    return name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else "")


def _histogram(path: Path, series: Series, by_le: dict[float, float], parts: dict[str, float]) -> Histogram:
    where = f"{path}: {_shown(series)}"
    if math.inf not in by_le:
        raise PlannerError(f'{where}: no le="+Inf" bucket: inconsistent histogram buckets')
    if "count" not in parts or "sum" not in parts:
        raise PlannerError(f"{where}: no _count or _sum beside its buckets: inconsistent histogram")
    bounds = sorted(by_le)
    counts = [by_le[b] for b in bounds]
    for lower, upper, a, b in zip(bounds, bounds[1:], counts, counts[1:]):
        if b < a or a < 0:
            raise PlannerError(
                f'{where}: bucket le="{upper:g}" = {b:g} below le="{lower:g}" = {a:g}: inconsistent histogram'
                " buckets (cumulative counts cannot fall)"
            )
    if counts[-1] != parts["count"]:
        raise PlannerError(
            f'{where}: le="+Inf" bucket = {counts[-1]:g} but _count = {parts["count"]:g}: inconsistent histogram'
            " buckets"
        )
    return Histogram(tuple(bounds[:-1]), np.asarray(counts[:-1], dtype=np.float64), parts["count"], parts["sum"])


def window(first: Scrape, last: Scrape) -> Scrape:
    """What happened between two scrapes of one server: every counter and histogram of the later less the
    earlier (gauges and cache_config_info: the later's)."""
    if first.identity() != last.identity():
        a, b = first.identity(), last.identity()
        what = "model_name" if a[0] != b[0] else CACHE_CONFIG_INFO
        shown_a, shown_b = (", ".join(a[0]), ", ".join(b[0])) if a[0] != b[0] else (dict(a[1]), dict(b[1]))
        raise PlannerError(
            f"{last.path}: {what} = {shown_b}, but {first.path} has {shown_a}: scrapes of different servers"
        )
    started = [{labels: v for (n, labels), v in x.gauges.items() if n == START_TIME} for x in (first, last)]
    for labels, value in started[1].items():
        if labels in started[0] and started[0][labels] != value:
            raise PlannerError(
                f"{last.path}: {START_TIME} = {value:.0f}, but {started[0][labels]:.0f} in {first.path}: the server"
                " restarted between the scrapes (its counters began again); give scrapes of one server's life"
            )
    out = Scrape(last.path, gauges=dict(last.gauges), cache_config=dict(last.cache_config))
    out.start_s, out.end_s = first.end_s, last.end_s
    for series, value in last.counters.items():
        before = first.counters.get(series, 0.0)
        if value < before:
            raise _backwards(first, last, _shown(series), before, value)
        out.counters[series] = value - before
    for series, h in last.histograms.items():
        before = first.histograms.get(series)
        if before is None:
            out.histograms[series] = h
            continue
        if before.bounds != h.bounds:
            raise PlannerError(f"{last.path}: {_shown(series)}: other buckets than in {first.path}: different servers")
        if h.count < before.count or np.any(h.cumulative < before.cumulative):
            raise _backwards(first, last, f"{_shown(series)}_count", before.count, h.count)
        out.histograms[series] = Histogram(
            h.bounds, h.cumulative - before.cumulative, h.count - before.count, h.sum - before.sum
        )
    if out.start_s is not None and out.end_s is not None and out.end_s <= out.start_s:
        raise PlannerError(
            f"{last.path}: its samples' timestamp {out.end_s:.3f} s is not after {first.path}'s"
            f" ({out.start_s:.3f} s): give the scrapes in the order they were taken (a folder: in name order)"
        )
    return out


def _backwards(first: Scrape, last: Scrape, series: str, before: float, after: float) -> PlannerError:
    return PlannerError(
        f"{last.path}: {series} = {after:g}, below {before:g} in the earlier {first.path}: a counter went backwards"
        " (the server restarted between the scrapes; give scrapes of one server's life)"
    )


def scrape_files(folder: Path) -> list[Path]:
    """A folder of periodic scrapes, in name order (name them by time: scrape-0001.prom, ...)."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if len(files) < 2:
        raise PlannerError(f"{folder}: {len(files)} scrape files: a time series needs at least two")
    return files
