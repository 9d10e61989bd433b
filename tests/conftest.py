"""What every test gets: Triton's interpreter where there is no CUDA device, one torch thread per pytest-xdist
worker, an empty profile folder, and the live cpu_tiny run shared by the tests that read it.

torch is imported here only where it is installed: the simulator's tests run on `pip install -e .` alone (the
engine's tests skip, saying torch is missing)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

# Under pytest-xdist each worker is a process of its own: on this 2-core machine two workers with torch's
# default threads each would fight over the cores (and a CPU engine's steps stall when they do), so each uses
# one. Set before torch is imported anywhere in the worker.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(name, "1")

# Set before any test module imports planner_kernels: Triton reads TRITON_INTERPRET when a kernel is decorated,
# so without a CUDA device the kernel tests run through Triton's CPU interpreter. The live engine's CPU path never
# calls Triton, so this changes nothing else.
if importlib.util.find_spec("torch") is not None:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


DEPENDENCIES = ("numpy", "scipy", "simpy", "matplotlib", "pyyaml", "torch", "transformers", "safetensors", "triton",
                "hypothesis", "pytest-xdist", "ray")  # fmt: skip


def pytest_report_header(config) -> str:
    """The versions this run tested (a CI log then says what a newly broken run installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in DEPENDENCIES:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return "dependencies: " + ", ".join(found)


@pytest.fixture(autouse=True)
def _empty_profile_folder(tmp_path_factory, monkeypatch):
    """`calibration: auto` reads the user's profile folder: tests see an empty one, not the developer's."""
    monkeypatch.setenv("PLANNER_PROFILE_DIR", str(tmp_path_factory.mktemp("profiles")))


@dataclass(frozen=True)
class LiveRun:
    folder: Path  # what `planner run --out` wrote: summary.json, requests.csv, steps.csv, figures
    summary: dict  # what --json printed


@pytest.fixture(scope="session")
def cpu_tiny_run(tmp_path_factory) -> LiveRun:
    """`planner run scenarios/cpu_tiny.yaml --device cpu --out DIR --json`, once per test process, for the tests
    that read a live run's files (compare, calibrate --from, their bad-input edits: each edits a copy). One torch
    thread, as `planner calibrate --device cpu` measures: two on a busy CI box stall whole steps."""
    torch = pytest.importorskip("torch")
    from helpers import ROOT

    from planner.cli import main

    folder = tmp_path_factory.mktemp("cpu_tiny_run") / "cpu_tiny"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        argv = ["run", str(ROOT / "scenarios" / "cpu_tiny.yaml"), "--device", "cpu", "--out", str(folder), "--json"]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    return LiveRun(folder, json.loads(printed.getvalue()))


def pytest_collection_modifyitems(config, items):
    """Tests that share the live run go to one pytest-xdist worker (--dist loadgroup), which runs it once."""
    for item in items:
        if "cpu_tiny_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("cpu_tiny_run"))
