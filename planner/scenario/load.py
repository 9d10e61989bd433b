"""Scenario YAML -> a validated `sim.config.Scenario`.

The scenario file is the product's public interface, so every mistake in it must come back as one message
that names the file, the dotted key, the bad value and what is allowed (`ScenarioError`).

How: the YAML is read by `planner.scenario.yaml_loader` (YAML 1.2 scalars, no duplicate keys) and `--set` overrides are applied; then the mapping is walked
generically along the dataclasses of `sim.config` (`planner.scenario.validation`), each value is checked against the
one `RULES` table (`planner.scenario.rules`), three fields are resolved specially (`planner.scenario.special_fields`: `model`,
`hardware.gpu`, `workload.trace.path`) and `check_relations` (`planner.scenario.cross_checks`) checks what involves
more than one field.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planner.errors import PlannerError, ScenarioError, read_text_file, show_value
from planner.scenario.cross_checks import check_relations
from planner.scenario.data_parallel import DBO_KEYS, drop_data_parallel_keys
from planner.scenario.rules import Ctx
from planner.scenario.validation import allowed_keys, build_dataclass
from planner.scenario.yaml_loader import parse_yaml
from sim.config import Scenario

# Keys of the YAML top level that may be left out, beyond the dataclass defaults (Scenario has none).
# `name` is filled in from the file's stem.
TOP_DEFAULTS = {"dtype": "bfloat16", "engine": {}, "workload": {}, "slo": {}}
MAX_SCENARIO_BYTES = 1 << 20  # a scenario is a page of text; a larger file is not one


# ---------------------------------------------------------------------------------------------------------
# Public API


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override (`--set key=value` strings) and validate a scenario file. Raises PlannerError."""
    path = Path(path)
    data = read_overridden(path, overrides, "scenario file", "a scenario needs at least `model` and `hardware.gpu`")
    return validate_mapping(data, str(path), path.absolute().parent)


def read_overridden(path: Path, overrides: Sequence[str], what: str, needs: str) -> Any:
    """A scenario-like file's YAML with the `--set` overrides applied (a sizing file reads the same way)."""
    data = parse_yaml(read_text_file(path, what, MAX_SCENARIO_BYTES), str(path))
    if data is None and not overrides:
        raise PlannerError(f"{path}: the file is empty; {needs}")
    return apply_overrides({} if data is None else data, overrides, str(path))


def validate_mapping(data: dict, source: str, base_dir: Path) -> Scenario:
    """Validate an already parsed scenario mapping; `source` names it in messages, `base_dir` anchors paths."""
    ctx = Ctx(source, Path(base_dir))
    if not isinstance(data, dict):
        raise ScenarioError(source, "top level", data, f"must be a mapping with keys {allowed_keys(Scenario)}")
    raw = {"name": Path(source).stem, **TOP_DEFAULTS, **data}
    if "fleet" in raw:  # several pools behind a router
        from planner.scenario.fleet import validate_fleet

        return dataclasses.replace(validate_fleet(raw, ctx), source=source)
    scenario = dataclasses.replace(build_dataclass(Scenario, raw, "", ctx), source=source)
    return check_relations(scenario, raw, ctx)


def apply_overrides(data: dict, overrides: Sequence[str], source: str) -> dict:
    """`engine.max_num_seqs=4` -> data["engine"]["max_num_seqs"] = 4 (value read as YAML), on a copy. A
    percentile key keeps its dot (`slo.ttft_ms.p99.9=5`). A key set twice, or a mapping set after a key inside
    it (which it would replace), is refused; a key set after its mapping goes in it, over what the mapping gave
    that key (the later --set is the more specific)."""
    data = copy.deepcopy(data)
    if overrides and not isinstance(data, dict):
        return data  # validate_mapping reports the top level
    earlier: dict[tuple[str, ...], str] = {}  # the keys set so far, and the --set that set each
    for raw_item in overrides:
        key, sep, text = raw_item.partition("=")
        item = _printable(raw_item)
        parts = _key_parts(key.strip())
        if not sep or not all(parts):
            raise PlannerError(f"--set {item}: expected dotted.key=value, e.g. engine.max_num_seqs=128")
        for path, given in earlier.items():
            if path[: len(parts)] == tuple(parts):  # the same key, or a mapping holding one set before
                what = "sets it again" if len(path) == len(parts) else f"replaces the mapping holding {'.'.join(path)}"
                raise PlannerError(f"--set {item}: {what}, given before by --set {given}; set each key once")
        earlier[tuple(parts)] = item
        value = parse_yaml(text, f"--set {item}")
        node = data
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}  # create intermediate mappings
            node = node[part]
            if not isinstance(node, dict):
                where = ".".join(parts[: i + 1])
                raise PlannerError(f"--set {item}: {source}: {where} is {show_value(node)}, not a mapping")
        node[parts[-1]] = value
    return data


def _key_parts(key: str) -> list[str]:
    """A dotted key's parts, a percentile's decimals kept with it: slo.ttft_ms.p99.9 -> slo, ttft_ms, p99.9."""
    parts: list[str] = []
    for part in key.split("."):
        if parts and re.fullmatch(r"p[0-9]+", parts[-1]) and re.fullmatch(r"[0-9]+", part):
            parts[-1] += "." + part
        else:
            parts.append(part)
    return parts


def _printable(text: str, limit: int = 80) -> str:
    """An override as messages show it: control characters escaped, cut short if long."""
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def scenario_to_dict(s: Scenario) -> dict:
    """The resolved scenario as JSON-able data (for summary.json): specs expanded, defaults filled in."""
    out = dataclasses.asdict(s)
    if s.fleet is None:
        del out["fleet"]  # a one-pool scenario's summary stays as it was
    out["model"]["num_params"] = s.model.num_params  # derived, but what a reader of a summary looks for
    del out["model"][
        "checkpoint"
    ]  # where the weights are downloaded from: no figure of the run (`planner size` prints it)
    out["max_model_len"] = s.max_model_len
    out["kv_dtype"] = s.kv_dtype
    if s.hardware.data_parallel_size == 1:
        drop_data_parallel_keys(out["hardware"], out["engine"])
        for pool in (out.get("fleet") or {}).get("pools", ()):  # refused in a fleet
            drop_data_parallel_keys(pool["hardware"], pool["engine"])
    elif not s.engine.enable_dbo:  # ... and a data-parallel group without dual-batch overlap
        for key in DBO_KEYS:
            del out["engine"][key]
    if s.engine.speculative is None:
        # Without speculative decoding its keys say nothing of the run: a summary keeps the keys it always had
        del out["engine"]["speculative"]
        for key in ("num_nextn_predict_layers", "draft_vocab_size"):
            del out["model"][key]
    for engine, config in ((out["engine"], s.engine), *zip(_pool_engines(out), _pool_configs(s), strict=True)):
        if config.kv_offload is None:
            del engine["kv_offload"]  # likewise without a host tier
        elif config.kv_offload.disk_gib is None:
            for key in ("disk_gib", "disk_read_gb_s", "disk_write_gb_s"):
                del engine["kv_offload"][key]  # ... and a host tier without a disk
    if s.workload.sessions is None:
        del out["workload"]["sessions"]  # ... and independent requests
    else:
        if not s.workload.sessions.wait_for_reply:
            del out["workload"]["sessions"]["wait_for_reply"]  # ... and sessions whose turns do not wait
        if s.workload.sessions.start == "empty":
            del out["workload"]["sessions"]["start"]  # ... and sessions from an empty start
    trace = s.workload.trace
    if trace is not None and trace.block_ids_column is None:  # ... and a trace without block ids, read in seconds
        for key in ("block_ids_column", "block_tokens", *(("arrival_unit",) if trace.arrival_unit == "s" else ())):
            del out["workload"]["trace"][key]
    return out


def _pool_engines(out: dict) -> list[dict]:
    return [pool["engine"] for pool in (out.get("fleet") or {}).get("pools", ())]


def _pool_configs(s: Scenario) -> list:
    return [pool.engine for pool in s.fleet.pools] if s.fleet is not None else []
