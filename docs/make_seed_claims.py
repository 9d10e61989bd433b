"""Generate docs/seed-claims.md from docs/seed_claims.yaml by running the planner.

Every figure the planner contributes to the page comes from a command listed next to it: each claim's
`planner` field (see the header of seed_claims.yaml) names a `planner ...` command line, a key into its JSON
output, an optional second command, an expression, a unit and a verdict rule. This script runs each distinct
command once (`python -m planner.cli ...`, the same as the `planner` entry point), evaluates the rules and
writes the page. The simulator is deterministic, so the same inputs give a byte-identical page.

    python docs/make_seed_claims.py            # rewrite docs/seed-claims.md
    python docs/make_seed_claims.py --check    # exit 1 if docs/seed-claims.md is out of date
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CLAIMS = REPO / "docs" / "seed_claims.yaml"
OUTPUT = REPO / "docs" / "seed-claims.md"

ARTICLES = {
    "000": "000_2d4ecc16cb811eac.txt — basics: pipeline, batching, metrics, memory, PagedAttention, worked example",
    "001": "001_b8ad21bfeda07981.txt — space/time trade-offs: memory formulas, tensor parallel, fusion, deployment, benchmarks",
}
HOLDS, PARTLY, FAILS, UNCHECKABLE = "holds", "partly holds", "does not hold", "not checkable"
VERDICT_ORDER = (HOLDS, PARTLY, FAILS, UNCHECKABLE)
BYTE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1e3, "MB": 1e6, "GB": 1e9}


# ---------------------------------------------------------------------------------------------------------
# Running commands


def argv_of(command: str) -> list[str]:
    """`planner ...` -> [python, -m, planner.cli, ...]."""
    args = shlex.split(command)
    if not args or args[0] != "planner":
        raise ValueError(f"not a planner command: {command!r}")
    return [sys.executable, "-m", "planner.cli", *args[1:]]


def run_command(command: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.run(argv_of(command), check=False, cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    # `planner memory` exits 2 when the deployment does not fit, after printing the breakdown: still an answer.
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(
            f"`{command}` printed no JSON (exit {proc.returncode}):\n{proc.stderr.strip() or proc.stdout[:500]}"
        ) from None


def run_all(commands: list[str], jobs: int) -> dict[str, dict]:
    """Each distinct command once, in parallel; results keyed by the command line."""
    unique = sorted(set(commands))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(zip(unique, pool.map(run_command, unique)))


# ---------------------------------------------------------------------------------------------------------
# Claims -> parts -> figures and verdicts


def load_claims(path: Path = CLAIMS) -> list[dict]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def parts_of(claim: dict) -> list[dict]:
    p = claim.get("planner")
    if p is None:
        return []
    return list(p) if isinstance(p, list) else [p]


def commands_of(claims: list[dict], only=None) -> list[str]:
    out = []
    for claim in claims:
        if only is not None and not only(claim):
            continue
        for part in parts_of(claim):
            out.append(part["command"])
            if "command_b" in part:
                out.append(part["command_b"])
    return out


def lookup(data: dict, dotted: str):
    node = data
    for piece in dotted.split("."):
        if not isinstance(node, dict) or piece not in node:
            raise KeyError(f"no key {dotted!r} (missing {piece!r})")
        node = node[piece]
    return node


def part_value(part: dict, results: dict[str, dict]):
    """The part's figure in the planner's own units (bytes, ms, fractions)."""
    ja = results[part["command"]]
    a = lookup(ja, part["key"])
    names = {"a": a, "A": lambda k: lookup(ja, k), "floor": math.floor, "ceil": math.ceil, "min": min, "max": max}
    expr = part.get("expr", "a")
    if "command_b" in part:
        jb = results[part["command_b"]]
        names |= {"b": lookup(jb, part.get("key_b", part["key"])), "B": lambda k: lookup(jb, k)}
        expr = part.get("expr", "a / b")
    return eval(expr, {"__builtins__": {}}, names)


def shown(value, unit: str):
    """The figure in the unit it is shown and judged in."""
    if isinstance(value, bool) or unit == "bool":
        return bool(value)
    if unit in BYTE_UNITS:
        return value / BYTE_UNITS[unit]
    if unit == "s":
        return value / 1000.0
    if unit in ("%", "pp"):
        return value * 100.0
    return value


def fmt(value, unit: str, digits: int) -> str:
    if unit == "bool" or isinstance(value, bool):
        return "yes" if value else "no"
    text = f"{value:,.{digits}f}"
    if text.startswith("-") and float(text.replace(",", "")) == 0:
        text = text[1:]
    suffix = {"": "", "count": "", "%": " %", "pp": " percentage points", "x": "×"}.get(unit, " " + unit)
    return text + suffix


def judge(value, rule: dict) -> bool:
    kind = rule["holds_if"]
    if kind == "within":
        return rule["low"] <= value <= rule["high"]
    if kind == "at_least":
        return value >= rule["value"]
    if kind == "at_most":
        return value <= rule["value"]
    if kind == "above":
        return value > rule["value"] + 1e-12
    if kind == "below":
        return value < rule["value"] - 1e-12
    if kind == "equals":
        want = rule["value"]
        if isinstance(want, bool) or isinstance(value, bool):
            return bool(value) == bool(want)
        return math.isclose(value, want, rel_tol=1e-9, abs_tol=1e-12)
    raise ValueError(f"unknown verdict rule {kind!r}")


def rule_text(rule: dict, unit: str) -> str:
    u = {"": "", "count": "", "bool": "", "x": "×", "%": "%"}.get(unit, " " + unit)

    def n(v):
        if isinstance(v, bool):
            return "yes" if v else "no"
        return f"{v:,}" if isinstance(v, int) else f"{v:,g}"

    kind = rule["holds_if"]
    if kind == "within":
        return f"holds if {n(rule['low'])}–{n(rule['high'])}{u}"
    sym = {"at_least": "≥", "at_most": "≤", "above": ">", "below": "<", "equals": "="}[kind]
    return f"holds if {sym} {n(rule['value'])}{u}"


def evaluate(claim: dict, results: dict[str, dict]) -> dict:
    """{'verdict', 'parts': [{'label', 'figure', 'rule', 'verdict' or None, 'command'(s), 'note'}]}."""
    rows, counted = [], []
    for part in parts_of(claim):
        unit, digits = part.get("unit", ""), part.get("digits", 2)
        value = shown(part_value(part, results), unit)
        row = {
            "label": part.get("label", ""),
            "figure": fmt(value, unit, digits),
            "note": part.get("note"),
            "commands": [(part["command"], part["key"])],
            "expr": part.get("expr"),
            "rule": None,
            "verdict": None,
        }
        if "command_b" in part:
            row["commands"].append((part["command_b"], part.get("key_b", part["key"])))
            row["expr"] = part.get("expr", "a / b")
        if "verdict" in part:
            ok = judge(value, part["verdict"])
            row["rule"] = rule_text(part["verdict"], unit)
            row["verdict"] = HOLDS if ok else FAILS
            counted.append(ok)
        rows.append(row)
    if not counted:
        verdict = UNCHECKABLE
    elif all(counted):
        verdict = HOLDS
    elif any(counted):
        verdict = PARTLY
    else:
        verdict = FAILS
    return {"verdict": verdict, "parts": rows}


# ---------------------------------------------------------------------------------------------------------
# The page


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def render(claims: list[dict], results: dict[str, dict]) -> str:
    evaluated = {c["id"]: evaluate(c, results) for c in claims}
    out = [
        "# The seed articles' claims, checked by the planner",
        "",
        "<!-- Generated by `python docs/make_seed_claims.py` from docs/seed_claims.yaml. Do not edit by hand. -->",
        "",
        (
            "The product was created from two Chinese articles about vLLM (`shared/seeds/`). They contain many figures, "
            "and several are wrong. This page lists every quantitative claim in them (from "
            "[`seed_claims.yaml`](seed_claims.yaml)), the planner's own figure for it, the exact command that "
            "produced that figure, and whether the claim holds."
        ),
        "",
        (
            "**Every planner figure on this page is produced by the command shown beside it; none is typed by hand.** "
            f"To regenerate the page: `python docs/make_seed_claims.py` (it runs the {len(results)} distinct commands, "
            "about 15 s on two cores). "
            "`tests/test_seed_claims.py` fails when the page no longer matches what the planner prints."
        ),
        "",
        "How to read it:",
        "",
        (
            "- A claim's figure is compared with the planner's within a tolerance derived from how the article states it: "
            '"~X" ±30%; a range "X–Y" [0.9 X, 1.1 Y]; a plain spec value ±5%; counts, formulas and defaults exactly; '
            "utilisation percentages ±10 percentage points; qualitative claims against the threshold given in the row's "
            "note. The exact rule of each row is shown with it (see the header of `seed_claims.yaml`)."
        ),
        (
            "- A claim with several figures is checked in parts: it *holds* if every part holds, *partly holds* if some "
            "do, *does not hold* if none does. Rows marked *context* are shown for information and not counted; a claim "
            "with only context rows is *not checkable* (the reason is given), for example an unnamed benchmark."
        ),
        (
            "- Units: MB/GB are 10^6/10^9 bytes, MiB/GiB 2^20/2^30 bytes. The planner's figures are predictions of its "
            "memory model and simulator (uncalibrated cost-model defaults), not measurements."
        ),
        (
            "- The command column gives each command and the JSON key read from its output (`→ key`); where the figure "
            "is computed, `figure = ...` gives the expression over `a` and `b` (those keys' values) and `A('x')`, "
            "`B('x')` (other fields of the same outputs), in the planner's units (bytes, ms, fractions) before the "
            "conversion to the unit shown."
        ),
        (
            "- Commands run from the repository root; `planner` is the CLI installed with the package "
            "(`python -m planner.cli` is the same)."
        ),
        "",
        "## Summary",
        "",
        "| | " + " | ".join(VERDICT_ORDER) + " | claims |",
        "|---|" + "---:|" * (len(VERDICT_ORDER) + 1),
    ]
    groups = [(f"article {a}", [c for c in claims if c["article"] == a]) for a in ARTICLES] + [("all", claims)]
    for name, group in groups:
        counts = [sum(evaluated[c["id"]]["verdict"] == v for c in group) for v in VERDICT_ORDER]
        out.append(f"| {name} | " + " | ".join(str(n) for n in counts) + f" | {len(group)} |")
    out += ["", "By kind:", "", "| kind | " + " | ".join(VERDICT_ORDER) + " |", "|---|" + "---:|" * len(VERDICT_ORDER)]
    for kind in sorted({c["kind"] for c in claims}):
        group = [c for c in claims if c["kind"] == kind]
        counts = [sum(evaluated[c["id"]]["verdict"] == v for c in group) for v in VERDICT_ORDER]
        out.append(f"| {kind} | " + " | ".join(str(n) for n in counts) + " |")
    wrong = [c for c in claims if evaluated[c["id"]]["verdict"] in (FAILS, PARTLY)]
    out += ["", "Claims that do not hold, or hold only in part:", ""]
    for c in wrong:
        out.append(f"- [`{c['id']}`](#{c['id']}) ({evaluated[c['id']]['verdict']}): {c['claim']}")

    for article, title in ARTICLES.items():
        out += [
            "",
            f"## Article {article}",
            "",
            f"`shared/seeds/{title.split(' — ')[0]}` — {title.split(' — ')[1]}.",
            "",
            "| claim | the article says | the planner | verdict | command |",
            "|---|---|---|---|---|",
        ]
        for c in (c for c in claims if c["article"] == article):
            ev = evaluated[c["id"]]
            claim_cell = f'<a id="{c["id"]}"></a>**`{c["id"]}`** ({c["kind"]})<br>{cell(c["claim"])}'
            says = f"{cell(c['figure'])}<br>「{cell(c['quote'])}」"
            planner_lines, command_lines = [], []
            for i, part in enumerate(ev["parts"], 1):
                tag = f"({i}) " if len(ev["parts"]) > 1 else ""
                label, ctx = part["label"], ""
                if not part["verdict"]:
                    ctx = "*context*: "
                    for prefix, tag_text in (
                        ("context (assumption): ", "*context, assumed setup*: "),
                        ("context: ", "*context*: "),
                    ):
                        if label.startswith(prefix):
                            label, ctx = label.removeprefix(prefix), tag_text
                line = f"{tag}{ctx}{cell(label)}: **{cell(part['figure'])}**"
                if part["verdict"]:
                    line += f" — {part['rule']}: *{part['verdict']}*"
                if part["note"]:
                    line += f" ({cell(part['note'])})"
                planner_lines.append(line)
                two = len(part["commands"]) > 1
                for name, (cmd, key) in zip("ab", part["commands"]):
                    var = f"{name} = " if two or part["expr"] else ""
                    command_lines.append(f"{tag}{var}`{cell(cmd)}` → `{cell(key)}`")
                if part["expr"]:
                    command_lines.append(f"{tag}figure = `{cell(part['expr'])}`")
            verdict = f"**{ev['verdict']}**"
            if ev["verdict"] == UNCHECKABLE:
                reason = c.get("not_checkable") or c.get("check", "")
                verdict += "<br>" + cell(reason.removeprefix("not checkable: ").removeprefix("not checkable "))
            out.append(
                f"| {claim_cell} | {says} | {'<br>'.join(planner_lines) or '—'} | {verdict} | "
                f"{'<br>'.join(command_lines) or '—'} |"
            )
    out.append("")
    return "\n".join(out)


def generate(jobs: int | None = None) -> str:
    claims = load_claims()
    results = run_all(commands_of(claims), jobs or min(8, os.cpu_count() or 1))
    return render(claims, results)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="do not write; exit 1 if the page is out of date")
    p.add_argument("--jobs", type=int, default=None, help="commands run at once (default: min(8, CPUs))")
    args = p.parse_args(argv)
    page = generate(args.jobs)
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != page:
            print(f"{OUTPUT.relative_to(REPO)} is out of date: run python docs/make_seed_claims.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(page, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
