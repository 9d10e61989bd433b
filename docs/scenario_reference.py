"""docs/scenario-reference.md, written from the code's own tables: every key the scenario loader accepts
(the dataclasses of sim/config.py, walked as planner/scenario/validation.py walks them), its type, its default,
what values it allows (the RULES table of planner/scenario/rules.py) and what it means (the field's comment in
sim/config.py). Run by docs/make_docs.py."""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "docs" / "scenario-reference.md"


def _field_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment in the class's source: the comment lines right above the field and the one at
    the end of its line, joined."""
    comments: dict[str, str] = {}
    above: list[str] = []
    for line in inspect.getsource(cls).splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
            continue
        m = re.match(r"\s+(\w+): [^=#]+?(?:=\s*[^#]*)?(?:#\s*(.*))?$", line)
        if m and not stripped.startswith(("def ", "@", '"""')):
            comments[m[1]] = m[2] or " ".join(above)  # its own line's comment, else the block above it
        above = []
    return comments


def _type_name(hint) -> str:
    from planner.scenario.validation import TYPE_NAMES

    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    if optional:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is dict:
        return "a mapping"
    name = TYPE_NAMES.get(hint, "a mapping" if dataclasses.is_dataclass(hint) else str(hint))
    return name + (" or null" if optional else "")


def _default(cls: type, f: dataclasses.Field) -> str:
    """The value a key left out takes: the dataclass default, the loader's own top-level defaults, or what
    `vllm serve` picks on the scenario's GPU for the limits sim/defaults.py resolves."""
    from planner.scenario.load import TOP_DEFAULTS
    from sim.config import EngineConfig, Scenario
    from sim.defaults import BatchLimits

    if cls is Scenario and f.name == "name":
        return "the file's name without `.yaml`"
    if cls is Scenario and f.name in TOP_DEFAULTS:
        value = TOP_DEFAULTS[f.name]
        return "each key's default" if value == {} else _yaml(value)
    if cls is EngineConfig and f.name in BatchLimits._fields:
        return "as `vllm serve` on the GPU ([table](#the-batch-limits-vllm-serve-picks))"
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    return _yaml(value)


def _yaml(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if dataclasses.is_dataclass(value):
        given = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        shown = {
            k: v for k, v in given.items() if v != next(f for f in dataclasses.fields(value) if f.name == k).default
        }
        if not shown:
            return "each key's default"
        return "`{" + ", ".join(f"{k}: {v}" for k, v in shown.items()) + "}`"
    if isinstance(value, dict):
        return "none" if not value else f"`{value}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rows(cls: type, prefix: str, sections: list[tuple[str, type]], titles: dict[type, str]) -> list[str]:
    """One table row per key of cls; a nested dataclass gets a section of its own (titles: each class's section
    title, one section per class however many keys take it)."""
    from planner.scenario.rules import RULES
    from planner.scenario.special_fields import SPECIAL
    from planner.scenario.validation import NOT_USER_KEYS

    hints = typing.get_type_hints(cls)
    comments = _field_comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if (cls, f.name) in NOT_USER_KEYS:
            continue
        key = f"{prefix}{f.name}"
        hint = hints[f.name]
        inner = next((a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)), hint)
        if (cls, f.name) in SPECIAL:
            allowed = SPECIAL[(cls, f.name)][1]()
            kind = _type_name(hint) if hint is str else "a list" if "tuple" in str(hint) else "a name or a mapping"
        elif dataclasses.is_dataclass(inner):
            if inner not in titles:
                titles[inner] = key
                sections.append((key, inner))
            else:
                titles[inner] += f", {key}"
            allowed, kind = (
                f"the keys below ([`{titles[inner].split(', ')[0]}`](#{inner.__name__.lower()}))",
                "a mapping",
            )
        else:
            rule = RULES.get((cls, f.name))
            allowed, kind = (rule.allowed if rule else "-"), _type_name(hint)
        what = comments.get(f.name, "")
        if not what and dataclasses.is_dataclass(inner):  # a section of its own: its class's first paragraph
            what = (inspect.getdoc(inner) or "").split("\n\n")[0]
        rows.append(f"| `{key}` | {kind} | {_default(cls, f)} | {_cell(allowed)} | {_cell(what)} |")
    return rows


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _opening_comment(path: Path) -> str:
    """A scenario file's first comment paragraph, as one line."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


HOW_IT_IS_READ = [
    "## How the file is read",
    "",
    "- **YAML 1.2** (`planner/scenario/yaml_loader.py`): `yes`, `on`, `off` and `1:20` are text (the message says so),",
    "  `012` is 12, `1e3` is a number; YAML 1.1's dates, `<<` and `=` are text. A key given twice, anchors and",
    "  aliases, nesting deeper than 32, control characters and bytes that are not UTF-8 are refused with the",
    "  line and column. A scenario that is not a regular file (a FIFO, a device) is refused before it is opened.",
    "- **Every numeric key has a range** a real deployment could have (the `allowed` column below);",
    "  non-finite numbers, `true` where a number goes, and integers of more than 30 digits are refused.",
    "- **Rules across keys** (`planner/scenario/cross_checks.py`): vLLM's rules for tensor parallel (it must",
    "  divide the attention heads), `max_model_len` and the token budget; what each length distribution and",
    "  arrival process needs; the trace columns they read.",
    "- **Trace files** (CSV with a header row, or JSONL): a value that is not a finite number in range, a JSONL",
    "  line that is not an object, a short CSV row, a binary or non-UTF-8 file: one message with the file, the",
    "  line and the column or key. A length of 0 is clipped to the distribution's `min`, like every drawn length.",
    "- `planner validate FILE` checks a file (and that the deployment fits) and prints the batch limits it runs",
    "  with; `summary.json`'s `scenario` is the resolved scenario, every default filled in.",
    "",
    "A property-based fuzz test (`tests/test_fuzz.py`) holds every input, hostile ones included, to one message",
    "and exit 2.",
    "",
]


TABLE_HEAD = ["| key | type | default | allowed | what it is |", "| --- | --- | --- | --- | --- |"]


def scenario_reference() -> str:
    """docs/scenario-reference.md."""
    from planner import catalog
    from planner.scenario.rules import ARRIVAL_TAKES, DISTS, SLO_KEYS
    from sim.config import Distribution, GpuSpec, Scenario, SloConfig
    from sim.defaults import serve_batch_defaults

    out = [
        "# Scenario reference",
        "",
        "Generated by `python docs/make_docs.py` from the code itself: the keys are the fields of the dataclasses in",
        "`sim/config.py` (the scenario loader walks them), the ranges are the `RULES` table of",
        "`planner/scenario/rules.py`, and each description is the field's comment in `sim/config.py`;",
        "`tests/test_docs.py` fails when this page and the code disagree.",
        "",
        "A scenario is one YAML file ([the shipped ones](#the-shipped-scenarios) are examples to copy). Every key but",
        "`model` and `hardware.gpu` has a default; relative paths resolve against the scenario file's folder. Any key",
        "can be overridden on the command line with `--set dotted.key=value`, checked like the file. A bad value exits",
        "with status 2 and one message naming the file, the key, the value and what is allowed.",
        "",
        *HOW_IT_IS_READ,
    ]
    sections: list[tuple[str, type]] = [("", Scenario)]
    titles: dict[type, str] = {Scenario: "top level"}
    while sections:
        prefix, cls = sections.pop(0)
        heading = f'## <a id="{cls.__name__.lower()}"></a>{titles[cls]}'
        out += [heading, "", *inspect.cleandoc(cls.__doc__ or "").splitlines(), ""]
        nested: list[tuple[str, type]] = []
        out += [*TABLE_HEAD, *_rows(cls, f"{prefix}." if prefix else "", nested, titles), ""]
        if cls is Distribution:
            out += [
                "Which parameters each `dist` takes (any other one given is refused):",
                "",
                *(
                    f"- `{d}`: {', '.join(f'`{p}`' for p in params) or 'none (the trace columns)'}"
                    for d, params in DISTS.items()
                ),
                "",
            ]
        if prefix == "workload.arrival":
            out += [
                "Which keys each `process` uses (any other one given is refused):",
                "",
                *(f"- `{p}`: {', '.join(f'`{k}`' for k in keys) or 'none'}" for p, keys in ARRIVAL_TAKES.items()),
                "",
            ]
        if cls is SloConfig:
            out += [f"Each bound is a mapping of statistic to milliseconds; statistics: {SLO_KEYS}.", ""]
        sections = nested + sections
    out += [
        "## hardware.gpu as a mapping",
        "",
        "A GPU not in the catalog is given as a mapping of these fields (the catalog's own entries,",
        "`planner/catalog/gpus.yaml`, use the same fields and cite a source for each):",
        "",
        *TABLE_HEAD,
        *(row for row in _rows(GpuSpec, "hardware.gpu.", [], {}) if not row.startswith("| `hardware.gpu.name`")),
        "",
        "## The shipped scenarios",
        "",
        "`scenarios/`, each file's own opening comment (a test validates every one):",
        "",
        "| file | what it is |",
        "| --- | --- |",
        *(
            f"| [`{path.name}`](../scenarios/{path.name}) | {_cell(_opening_comment(path))} |"
            for path in sorted((REPO / "scenarios").glob("*.yaml"))
        ),
        "",
        "## The batch limits `vllm serve` picks",
        "",
        "`engine.max_num_seqs` and `engine.max_num_batched_tokens` left out of a scenario take the values `vllm serve`",
        "picks on the scenario's GPU (`sim/defaults.py`, after vLLM's `EngineArgs.get_batch_defaults`), then the",
        "adjustments vLLM makes for unset values (without chunked prefill the budget is at least `max_model_len`; it",
        "is at most `max_num_seqs` x `max_model_len`). `planner validate FILE` prints the values a scenario runs",
        "with. Per catalog GPU, at tensor parallel 1:",
        "",
        "| GPU | max_num_batched_tokens | max_num_seqs |",
        "| --- | ---: | ---: |",
        *(
            f"| `{name}` | {limits.max_num_batched_tokens:,} | {limits.max_num_seqs:,} |"
            for name in catalog.gpu_names()
            for limits in [serve_batch_defaults(catalog.catalog_gpu(name))]
        ),
        "",
    ]
    return "\n".join(out)
