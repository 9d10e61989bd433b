"""Keep the manual true to the code: every figure in README.md and docs/*.md is produced here, not typed.

- docs/scenario-reference.md is written from the code's own tables: every key the scenario loader accepts
  (the dataclasses of sim/config.py, walked as planner/scenario/validation.py walks them), its type, its default,
  what values it allows (the RULES table of planner/scenario/rules.py) and what it means (the field's comment in
  sim/config.py). A key, a default or a range changed in the code changes the page.
- Every output block of README.md and docs/*.md is rewritten from the commands it shows: in a fenced block
  ```console, each `$ COMMAND` line is followed by what COMMAND prints (stdout and stderr; `run_block` says
  where it runs), so a figure quoted there is what the planner prints today.
- README.md's accuracy table is summarised from docs/fidelity.md and docs/vllm-fidelity.md,
  the pages their own generators keep (`python -m planner.fidelity`, `python docs/vllm_fidelity.py`).

    python docs/make_docs.py            # rewrite what is stale
    python docs/make_docs.py --check    # rewrite nothing; exit 1 naming what is stale (tests/test_docs.py)
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import re
import subprocess
import sys
import tempfile
import types
import typing
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script from anywhere: the checkout's packages first

REFERENCE = REPO / "docs" / "scenario-reference.md"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMAND_TIMEOUT_S = 300
# A console block: ```console, then `$ COMMAND` lines, each followed by what it prints.
OUTPUT_BLOCK = re.compile(r"^```console\n(?P<body>\$ .*?)^```$", re.MULTILINE | re.DOTALL)
ACCURACY_TABLE = re.compile(r"<!-- accuracy table: .*? -->\n(?:\|[^\n]*\n)+", re.DOTALL)


# ---------------------------------------------------------------------------------------------------------
# Output blocks


def block_commands(body: str) -> tuple[str, ...]:
    """The commands of a console block's body: its `$ ` lines."""
    return tuple(line[2:] for line in body.splitlines() if line.startswith("$ "))


def run_block(commands: tuple[str, ...]) -> str:
    """A console block's body as the commands print it now: each `$ COMMAND` line followed by what it prints
    (stdout, then stderr). The commands run in order, by bash, in one fresh folder holding a link to the
    repository's scenarios/ (so what they write stays there, and paths print as a user in the checkout types
    them), with this interpreter's folder first on PATH (its `planner` and `python`) and an empty profile folder
    (a user's own calibration profiles would change `calibration: auto`)."""
    parts = []
    with tempfile.TemporaryDirectory(prefix="planner-docs-") as folder:
        work, profiles = Path(folder) / "work", Path(folder) / "profiles"
        work.mkdir()
        profiles.mkdir()
        (work / "scenarios").symlink_to(REPO / "scenarios")
        env = dict(
            os.environ,
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            PLANNER_PROFILE_DIR=str(profiles),
            PYTHONHASHSEED="0",
            COLUMNS="120",
        )
        for command in commands:
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", command],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
            printed = (done.stdout + done.stderr).rstrip("\n")
            parts.append(f"$ {command}" + (f"\n{printed}" if printed else ""))
    return "\n".join(parts) + "\n"


def refresh_outputs(text: str, run: Callable[[tuple[str, ...]], str] = run_block) -> str:
    """text with every console block's outputs replaced by what its commands print now."""
    return OUTPUT_BLOCK.sub(lambda m: f"```console\n{run(block_commands(m['body']))}```", text)


def output_blocks(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(body, commands) of every console block of a page."""
    return [(m["body"], block_commands(m["body"])) for m in OUTPUT_BLOCK.finditer(text)]


# ---------------------------------------------------------------------------------------------------------
# The scenario reference


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
            allowed, kind = SPECIAL[(cls, f.name)][1](), _type_name(hint) if hint is str else "a name or a mapping"
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


# ---------------------------------------------------------------------------------------------------------
# The accuracy table


def _span(values: list[float], unit: str = "%") -> str:
    lo, hi = min(values), max(values)
    return f"{lo:g}{unit}" if lo == hi else f"{lo:g}-{hi:g}{unit}"


def _pct(cell: str) -> float:
    return float(re.match(r"[+-]?[\d.]+", cell.replace("**", "").strip())[0])


ENGINE_NAMES = {"vllm-v0": "vLLM V0", "vllm-v1": "vLLM V1"}  # the development set's version classes


def accuracy_rows() -> list[str]:
    """The accuracy table: what the predictions were checked against, and the error."""
    fidelity = (REPO / "docs" / "fidelity.md").read_text(encoding="utf-8")
    profiles = _first_table(fidelity, "## Shipped profiles")
    met = sum(1 for r in profiles if r["target met"] == "yes")
    steps = [_pct(r["step median"]) for r in profiles]
    steps_p90 = [_pct(r["step p90"]) for r in profiles]
    spec = [_pct(r["spec-sheet step med / p90"].split("/")[0]) for r in profiles]
    folds = _first_table(fidelity, "## Leave-one-GPU-out")
    fold_layers = [_pct(r["layer median"]) for r in folds]
    public = _first_table(fidelity, "## Public end-to-end figures")
    public_errors = [_pct(r["error"]) for r in public]
    vllm = (REPO / "docs" / "vllm-fidelity.md").read_text(encoding="utf-8")
    logs = _first_table(vllm, "## Start-up logs")
    counted = [_pct(r["error"]) for r in logs if r["counts"] == "yes"]
    other = [_pct(r["error"]) for r in logs if r["counts"] != "yes"]
    kv = [_pct(r["error"]) for r in _first_table(vllm, "## KV per token")]
    kernels = _first_table(fidelity, "## vLLM 0.19's kernels")
    attention = [_pct(r["median"]) for r in kernels if r["term"] == "attention, the simulator's"]
    devset = _first_table(fidelity, "## The development set")
    vllm_throughput = [
        f"{_signed(_pct(r['median signed']))} ({ENGINE_NAMES[r['engine']]} on {r['vendor'].upper()}, {_count(r['points'], 'point')})"
        for r in devset
        if r["engine"].startswith("vllm") and r["figure"] == "output_throughput_tps"
    ]
    return [
        "| what is predicted | checked against | error | where |",
        "| --- | --- | --- | --- |",
        (
            f"| a step's GPU time, shipped profiles (A100, A40, H100 at tp 1-8; RTX 4090, RTX PRO 6000 at tp 1-2) |"
            " Vidur's and LLMServingSim's measured operators | median"
            f" {_span(steps)}, p90 {_span(steps_p90)}; target 5% / 10% met by {met} of {len(profiles)}"
            f" (spec-sheet defaults: median {_span(spec)}) | [fidelity](docs/fidelity.md#shipped-profiles-fit-quality-on-their-own-measurements) |"
        ),
        (
            f"| a layer's time on a GPU never profiled (transfer) | the held-out GPU's measurements | median"
            f" {_span(fold_layers)} over {len(folds)} folds | [fidelity](docs/fidelity.md#leave-one-gpu-out-the-honest-error-of-transfer) |"
        ),
        (
            f"| attention's time per layer (vLLM 0.19's kernels) | LLMServingSim's measured grids |"
            f" median {_span(attention)} over {len(attention)} GPU, model and tp bundles |"
            " [fidelity](docs/fidelity.md#vllm-019s-kernels-attention-fused-moe-lm-head-and-sampler-llmservingsims-profiles) |"
        ),
        (
            f"| output throughput of published vLLM deployments (development set) | published measurements |"
            f" median signed {', '.join(vllm_throughput)}: the planner is too fast there |"
            " [fidelity](docs/fidelity.md#the-development-set-published-serving-measurements) |"
        ),
        (
            f"| throughput and latency end to end | {len(public)} published TensorRT-LLM and vLLM figures |"
            f" {_signed(min(public_errors))} to {_signed(max(public_errors))} | [fidelity](docs/fidelity.md#public-end-to-end-figures) |"
        ),
        (
            f"| the KV pool at start-up (`num_gpu_blocks`) | vLLM >= 0.21 start-up logs with every setting known |"
            f" {', '.join(map(_signed, counted))} ({len(counted)} log; {len(other)} older ones account memory otherwise:"
            f" {_signed(min(other))} to {_signed(max(other))}) | [vLLM fidelity](docs/vllm-fidelity.md#start-up-logs) |"
        ),
        (
            f"| KV bytes per token | vLLM logs that state them | {_signed(min(kv))} to {_signed(max(kv))} ({len(kv)} logs) |"
            " [vLLM fidelity](docs/vllm-fidelity.md#kv-per-token) |"
        ),
    ]


def _count(number: str, noun: str) -> str:
    return f"{number} {noun}" if number == "1" else f"{number} {noun}s"


def _signed(value: float) -> str:
    return f"{value:+g}%"


def _first_table(text: str, heading: str) -> list[dict[str, str]]:
    start = text.index(heading)
    lines = text[start:].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in line.strip().strip("|").split("|")])
    header, body = table[0], table[2:]
    return [dict(zip(header, row)) for row in body]


def refresh_accuracy(text: str, rows: list[str], link_prefix: str) -> str:
    """text with its accuracy table (after its marker comment) replaced; links relative to the page."""
    table = "\n".join(rows).replace("(docs/", f"({link_prefix}") + "\n"
    return ACCURACY_TABLE.sub(lambda m: m[0].split("\n", 1)[0] + "\n" + table, text)


# ---------------------------------------------------------------------------------------------------------


def expected_pages() -> dict[Path, str]:
    """Every page this script keeps, as it should read now."""
    pages = {REFERENCE: scenario_reference()}
    accuracy = accuracy_rows()
    for page in PAGES:
        if page == REFERENCE:
            continue
        text = page.read_text(encoding="utf-8")
        prefix = "" if page.parent.name == "docs" else "docs/"
        pages[page] = refresh_accuracy(refresh_outputs(text), accuracy, prefix)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    stale = []
    for page, text in expected_pages().items():
        current = page.read_text(encoding="utf-8") if page.exists() else None
        if current == text:
            continue
        stale.append(page.relative_to(REPO))
        if not args.check:
            page.write_text(text, encoding="utf-8")
    verb = "stale" if args.check else "rewrote"
    print(f"{verb}: {', '.join(map(str, stale))}" if stale else "every page is current")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
