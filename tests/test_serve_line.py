"""`planner size`'s `vllm serve` line names what vLLM can load: the Hugging Face repository a catalog entry was
copied from (the one the entry's comment cites, kept once, in models.yaml), or the local folder of a model read
from a path. A model with neither (an inline mapping, the unpublished tiny test models) gets a comment instead."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

from planner.catalog import _catalog_entries, catalog_model, model_names
from planner.scenario.load import load_scenario
from planner.sizing.serve import vllm_serve_command

BASE = ROOT / "scenarios/a10_qwen7b.yaml"
# A repository id as the Hub spells one: organisation/name, letters, digits, '-', '_' and '.'.
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
TINY_CONFIG = {  # tiny-llama's fields, as a user's own config.json would hold them
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
}


def served(line: str) -> str:
    """The model argument of a `vllm serve` line."""
    assert line.startswith("vllm serve "), line
    return line.split()[2]


def loadable(model: str) -> bool:
    """A repository id the catalog cites, or a local folder holding an HF config.json."""
    cited = {catalog_model(name).checkpoint for name in model_names()}
    return (REPO_ID.fullmatch(model) is not None and model in cited) or (Path(model) / "config.json").is_file()


def test_each_catalog_entry_carries_the_repository_its_comment_cites():
    for name, text in _catalog_entries("models.yaml").items():
        checkpoint = catalog_model(name).checkpoint
        first_comment = next(line.strip() for line in text.splitlines() if line.strip().startswith("#"))
        if checkpoint is None:
            assert first_comment.startswith("# Not a published model"), name
        else:
            assert REPO_ID.fullmatch(checkpoint), (name, checkpoint)
            assert first_comment.startswith(f"# {checkpoint} config.json"), (name, first_comment)
    published = [name for name in model_names() if catalog_model(name).checkpoint]
    assert len(published) == len(model_names()) - 2  # all but tiny-llama and tiny-qwen2


def test_every_catalog_models_serve_line_names_its_repository():
    for name in model_names():
        scenario = load_scenario(BASE, [f"model={name}", "engine.max_model_len=2048"])
        line = vllm_serve_command(scenario)
        checkpoint = catalog_model(name).checkpoint
        if checkpoint is None:
            assert line.startswith(f"# no vllm serve line: the model {name} has no checkpoint to load"), line
        else:
            assert served(line) == checkpoint and loadable(served(line)), line


def test_a_model_read_from_a_folder_is_served_from_that_folder_and_an_inline_one_not_at_all(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    for given in (folder, folder / "config.json"):
        line = vllm_serve_command(load_scenario(BASE, [f"model={given}", "engine.max_model_len=2048"]))
        assert served(line) == str(folder) and loadable(served(line)), line
    inline = "model={" + ", ".join(f"{k}: {v}" for k, v in TINY_CONFIG.items()) + "}"
    line = vllm_serve_command(load_scenario(BASE, [inline, "engine.max_model_len=2048"]))
    assert line.startswith("# no vllm serve line: the model inline has no checkpoint to load"), line


def test_planner_size_prints_a_loadable_model_in_every_serve_line():
    """The catalog's Llama-3.3-70B, which the serve line once named by its catalog name (no repository)."""
    overrides = [
        "model=llama-3.3-70b",
        "engine.max_model_len=4096",
        "search.candidates.gpus=[h100-sxm]",
        "search.candidates.tensor_parallel_sizes=[4, 8]",
        "search.probe.num_requests=40",
        "search.probe.max_probes=4",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "planner.cli", "size", str(BASE), *(a for o in overrides for a in ("--set", o))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("vllm serve ")]
    assert lines, done.stdout
    assert all(served(line) == "meta-llama/Llama-3.3-70B-Instruct" and loadable(served(line)) for line in lines)
