"""`--from-vllm FILE ...`, sorted out: bench-serve result JSONs, and Prometheus scrapes (one: the server's life
until then; several files or a folder of them: the windows between consecutive ones, in the order given, a folder's
in name order); the model they name checked against the scenario's, the engine facts they carry read."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from planner.errors import PlannerError
from planner.vllm_files.bench_read import BenchRun, read_bench
from planner.vllm_files.prom_read import Scrape, read_scrape, scrape_files, window
from sim.config import ModelSpec


@dataclass(frozen=True)
class VllmInputs:
    bench: list[BenchRun]
    windows: list[Scrape]  # what the scrapes cover: one per scrape pair (or the single scrape)
    engine: dict  # EngineConfig fields the files fix (block_size, num_gpu_blocks_override)
    facts: list[str]  # lines saying which, and from which file


def _is_json(path: Path) -> bool:
    if path.suffix == ".json":
        return True
    try:
        with path.open("rb") as f:
            return f.read(64).lstrip().startswith(b"{")
    except OSError:
        return False  # read_scrape says why


def model_matches(name: str, model: ModelSpec) -> bool:
    """A served model name (a Hugging Face id, a path, or --served-model-name) is the scenario's model when it
    is its catalog name or its checkpoint, in any case, with or without the organisation or folder."""
    known = {model.name.lower(), *([model.checkpoint.lower()] if model.checkpoint else [])}
    known |= {k.rsplit("/", 1)[-1] for k in known}
    return name.lower() in known or name.rstrip("/").rsplit("/", 1)[-1].lower() in known


def _check_model(path: Path, field: str, name: str, model: ModelSpec) -> None:
    if not model_matches(name, model):
        also = f" (checkpoint {model.checkpoint})" if model.checkpoint else ""
        raise PlannerError(
            f"{path}: {field} = {name!r}: the scenario's model is {model.name}{also}; fit files of the scenario's model"
            " (or give the scenario of the model they measured)"
        )


def _windows(scrapes: list[Scrape]) -> list[Scrape]:
    if len(scrapes) == 1:
        return scrapes
    return [window(a, b) for a, b in itertools.pairwise(scrapes)]


def read_inputs(paths: list[Path], model: ModelSpec) -> VllmInputs:
    bench, loose, windows = [], [], []
    for path in paths:
        if path.is_dir():
            windows += _windows([read_scrape(p) for p in scrape_files(path)])
        elif _is_json(path):
            bench.append(read_bench(path))
        else:
            loose.append(read_scrape(path))
    if loose:
        windows += _windows(loose)
    for run in bench:
        if run.model_id is not None:
            _check_model(run.path, "model_id", run.model_id, model)
    for scrape in windows:
        for name in sorted(scrape.models()):
            _check_model(scrape.path, "model_name", name, model)
    engine, facts = _engine_facts(windows)
    return VllmInputs(bench, windows, engine, facts)


def _engine_facts(windows: list[Scrape]) -> tuple[dict, list[str]]:
    """block_size and num_gpu_blocks from vllm:cache_config_info: the server's, over the memory model's."""
    engine, facts, source = {}, [], {}
    for scrape in windows:
        for label, field in (("block_size", "block_size"), ("num_gpu_blocks", "num_gpu_blocks_override")):
            text = scrape.cache_config.get(label)
            if text is None:
                continue
            if not text.isdigit() or int(text) < 1:
                raise PlannerError(
                    f"{scrape.path}: vllm:cache_config_info {label} = {text!r}: must be a whole number >= 1"
                )
            if field in engine and engine[field] != int(text):
                raise PlannerError(
                    f"{scrape.path}: vllm:cache_config_info {label} = {text}, but {source[field]} has"
                    f" {engine[field]}: scrapes of different servers"
                )
            engine[field], source[field] = int(text), scrape.path
    for field, label in (("block_size", "block_size"), ("num_gpu_blocks_override", "num_gpu_blocks")):
        if field in engine:
            facts.append(f"  {label} = {engine[field]:,} (vllm:cache_config_info, {source[field]})")
    return engine, facts
