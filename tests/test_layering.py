"""The serving model in sim/ is shared by the live engine: it must import neither torch nor simpy."""

import subprocess
import sys

import pytest

SHARED = [
    "sim.config",
    "sim.defaults",
    "sim.request",
    "sim.block_pool",
    "sim.kv_manager",
    "sim.kv_groups",
    "sim.scheduler",
    "sim.decode_windows",
    "sim.trace_file",
    "sim.workload",
    "sim.metrics",
    "sim.statistics",
    "sim.kv_sizing",
    "sim.weights",
    "sim.engine_facts",
    "sim.memory",
    "sim.memory_fit",
    "sim.cost_model",
]


def test_shared_serving_model_imports_neither_torch_nor_simpy():
    code = (
        f"import sys; import {', '.join(SHARED)}; "
        "bad = [m for m in ('torch', 'simpy', 'gpu_engine', 'planner') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_live_engine_imports_neither_the_simulator_driver_nor_the_cli():
    pytest.importorskip("torch")
    code = (
        "import sys, gpu_engine.engine; "
        "print([m for m in ('simpy', 'sim.driver', 'sim.replica', 'planner') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_cli_import_leaves_numpy_and_the_simulator_to_the_commands():
    """`import planner.cli` stays light (issue 14's start-up target): each command imports what it needs."""
    code = (
        "import sys, planner.cli; "
        "print([m for m in ('numpy', 'simpy', 'yaml', 'scipy', 'matplotlib', 'torch') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
