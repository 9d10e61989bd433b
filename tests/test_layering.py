"""The serving model in sim/ is shared by the live engine: it must import neither torch nor simpy."""

import subprocess
import sys

SHARED = [
    "sim.config",
    "sim.request",
    "sim.block_pool",
    "sim.kv_manager",
    "sim.scheduler",
    "sim.workload",
    "sim.metrics",
    "sim.memory",
    "sim.cost_model",
]


def test_shared_serving_model_imports_neither_torch_nor_simpy():
    code = (
        f"import sys; import {', '.join(SHARED)}; "
        "bad = [m for m in ('torch', 'simpy', 'gpu_engine', 'planner') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
