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
    "sim.workload_draws",
    "sim.sessions",
    "sim.metrics",
    "sim.statistics",
    "sim.kv_sizing",
    "sim.weights",
    "sim.engine_facts",
    "sim.memory",
    "sim.memory_fit",
    "sim.cost_model",
    "sim.moe_group",
    "sim.dp_balancer",
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
        "import sys, gpu_engine.engine, gpu_engine.data_parallel; "
        "print([m for m in ('simpy', 'sim.driver', 'sim.simulation', 'sim.replica', 'sim.data_parallel', 'planner') if m in sys.modules])"
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


# planner/'s own layers, bottom up: what a lower package may import of planner (sim/ it always may).
PLANNER_LAYERS = {
    # errors and paths (what the file system takes) are leaves: they import nothing of planner's
    "scenario": {"errors", "paths", "scenario", "catalog"},  # reading and checking a scenario; the catalogs it names
    "catalog": {"errors", "paths", "scenario", "catalog"},
    "outputs": {"errors", "paths", "scenario", "catalog", "outputs", "vllm_files"},  # a run's files, plots, text
    "vllm_files": {"errors", "vllm_files"},  # vLLM's result and metrics formats, written and read
}


def _planner_imports(package: str) -> dict[str, set[str]]:
    """Module file -> the planner packages it imports anywhere in it (function-level imports included)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "planner" / package
    found = {}
    for path in sorted(root.rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] + [f"planner.{a.name}" for a in node.names if node.module == "planner"]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            names |= {m.split(".")[1] for m in modules if m.startswith("planner.")}
            names |= {m.split(".")[0] for m in modules if m.split(".")[0] in ("gpu_engine", "planner_kernels")}
        found[str(path.relative_to(root.parents[1]))] = names
    return found


@pytest.mark.parametrize("package", sorted(PLANNER_LAYERS))
def test_planner_lower_packages_import_nothing_above_them(package):
    """Reading scenarios and writing a run's outputs sit under calibration, sizing and the commands: they never
    reach up into them (nor into the live engine)."""
    above = {
        module: sorted(names - PLANNER_LAYERS[package])
        for module, names in _planner_imports(package).items()
        if names - PLANNER_LAYERS[package]
    }
    assert not above, f"planner/{package} imports from above its layer: {above}"
