"""Scenario YAML -> plain data, without YAML 1.1's surprises and without a way to crash or hang the reader.

PyYAML's SafeLoader follows YAML 1.1: `1:20` is the integer 80 (base 60), `on`, `yes`, `off` and `no`
are booleans, `012` is octal 10, and `1e3` is a string. This loader resolves plain scalars by the YAML 1.2
core schema instead (what a reader of the file expects): booleans are only true/false, integers are decimal
(or 0o.. / 0x..), `1e3` is a float, `null`/`~`/nothing is null, and everything else is a string, which
validation then reports against the key's type ("expected true or false", "expected an integer"): YAML 1.1's
timestamps (`2026-02-30` crashed the reader as a date out of range, and a valid one was no name), merge keys
(`<<`) and value keys (`=`) are plain strings too. It also refuses what no scenario needs
and what makes a reader misbehave: a key given twice (PyYAML silently keeps the last), anchors and aliases
(exponential "billion laughs" expansions), integers of more than MAX_INT_DIGITS digits, and nesting deeper
than MAX_DEPTH. Every refusal is a `PlannerError` naming the file, line and column.

Our own packaged YAML (catalogs, shipped calibrations) is no user input: `parse_packaged_yaml` reads it as
it was written, with PyYAML's SafeLoader.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from planner.errors import PlannerError, show_value

MAX_DEPTH = 32  # a scenario nests 4 levels; an inline model or GPU mapping a few more
MAX_INT_DIGITS = 30  # 10^30 is beyond every range in planner.scenario.rules; Python refuses to parse > 4,300 digits
YAML11_BOOLS = {"yes", "no", "on", "off", "y", "n"}  # for the hint on a boolean key

_BOOL_TAG, _INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), plus `_` digit separators in
# decimal integers, which PyYAML reads and the shipped catalog uses (23_815_258_112).
_CORE = {
    _BOOL_TAG: (re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")),
    _INT_TAG: (re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")),
    _FLOAT_TAG: (
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+.0123456789"),
    ),
}


class Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core scalars, no duplicate keys and no aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (*name) are not supported in scenarios", event.start_mark
            )
        return super().compose_node(parent, index)


_NULL_TAG, _MERGE_TAG = "tag:yaml.org,2002:null", "tag:yaml.org,2002:merge"
Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag == _NULL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _tag, (_regexp, _first) in _CORE.items():
    Loader.add_implicit_resolver(_tag, _regexp, _first)


def _construct_int(loader: Loader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node).replace("_", "")
    digits = text.lstrip("+-")
    if len(digits) > MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {len(digits)} digits is too large (at most {MAX_INT_DIGITS})", node.start_mark
        )
    if digits[:2] in ("0o", "0x"):
        sign = -1 if text.startswith("-") else 1
        return sign * int(digits[2:], 8 if digits[1] == "o" else 16)
    return int(text)  # decimal, leading zeros included: 012 is 12 (YAML 1.2), not octal 10


def _construct_float(loader: Loader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node).replace("_", "").lower()
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    return float("nan") if text == ".nan" else float(text)  # 1e400 -> inf: validation refuses non-finite


def _construct_mapping(loader: Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:  # `<<: *base` (YAML 1.1, profiles): merged by the base constructor
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key: the base constructor reports it
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
            )
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


Loader.add_constructor(_INT_TAG, _construct_int)
Loader.add_constructor(_FLOAT_TAG, _construct_float)
Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text -> data; any problem is a PlannerError naming `source` and, where known, line and column."""
    try:
        data = yaml.load(text, Loader=Loader)  # safe: a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        what = "; ".join(p for p in (e.context, e.problem) if p)
        raise PlannerError(f"{source}: {_where(mark.line, mark.column) if mark else ''}invalid YAML: {what}") from None
    except yaml.reader.ReaderError as e:  # a control character or a byte that is not text
        line = text.count("\n", 0, e.position)
        column = e.position - (text.rfind("\n", 0, e.position) + 1)
        char = e.character if isinstance(e.character, str) else chr(e.character)
        raise PlannerError(
            f"{source}: {_where(line, column)}invalid YAML: control character U+{ord(char):04X} is not allowed"
            " (YAML takes printable text, tabs and newlines)"
        ) from None
    except yaml.YAMLError as e:
        raise PlannerError(f"{source}: invalid YAML: {e}") from None
    except RecursionError:
        raise PlannerError(f"{source}: invalid YAML: nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, OverflowError) as e:  # an explicit tag's value out of range (!!timestamp 2026-02-30)
        raise PlannerError(f"{source}: invalid YAML: {e}") from None
    _check_depth(data, source)
    return data


# libyaml's C parser where PyYAML was built with it: the same SafeLoader, several times faster than the
# pure-Python one, which took ~60 ms of every `planner simulate` to read the two catalogs.
_PACKAGED_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_packaged_yaml(text: str) -> Any:
    """YAML that ships with planner -> data, by YAML 1.1 as PyYAML's safe_load reads it."""
    return yaml.load(text, Loader=_PACKAGED_LOADER)  # safe: a SafeLoader


class _UniqueKeysLoader(_PACKAGED_LOADER):  # type: ignore[misc, valid-type]
    """The packaged loader, refusing a key given twice."""


_UniqueKeysLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml11_unique_keys(text: str) -> Any:
    """YAML 1.1 as parse_packaged_yaml reads it (files planner writes, such as calibration profiles, which a
    user may also edit or pass), refusing a key given twice (PyYAML silently keeps the last)."""
    return yaml.load(text, Loader=_UniqueKeysLoader)  # safe: a SafeLoader


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # Unicode's Cc characters but the tab


def _where(line: int, column: int) -> str:
    return f"line {line + 1}, column {column + 1}: "


def _check_depth(data: Any, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH (iterative: a deep structure must not overflow the stack here),
    and strings that are not one line of text: a "\\ud800" escape gives a lone surrogate that no file name,
    terminal or encoder takes, and a "\\x1b" or "\\n" escape (or a block scalar's newlines) a control character
    that the outputs would print raw (an escape sequence to the terminal, a newline that fakes an output line;
    the reader refuses them written raw, tabs and line breaks aside). A tab is kept."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise PlannerError(
                    f"{source}: invalid YAML: a string holds a lone surrogate (U+{ord(value[e.start]):04X}), not text"
                ) from None
            control = _CONTROL.search(value)
            if control:
                raise PlannerError(
                    f"{source}: invalid YAML: the string {show_value(value)} holds control character"
                    f" U+{ord(control.group()):04X}; strings are one line of printable text"
                )
        if isinstance(value, dict):
            stack.extend((key, depth) for key in value)
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise PlannerError(f"{source}: invalid YAML: nested deeper than {MAX_DEPTH} levels")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
