"""What the tests share, in one place: no test module imports another, so one module that cannot be imported
takes out only itself. Submodules: scenario_files (scenario YAML written to disk and its errors), scenarios
(scenarios built in code), sizing, runs (comparing two simulations), parity (the simulator's and the live
engine's step decisions), browser (headless Chromium), and, needing torch, engine and kernels."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from planner.cli import main

ROOT = Path(__file__).resolve().parents[2]  # the repository
SCENARIOS = ROOT / "scenarios"


def error_of(argv: list[str], capsys) -> str:
    """`planner argv` in this process, which must exit 2 with one line on stderr and no traceback: that line."""
    capsys.readouterr()  # what earlier calls printed is not this call's
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("planner: error: ") and "\n" not in err and "Traceback" not in err
    return err


HAS_TORCH = importlib.util.find_spec("torch") is not None
# A test that runs the live engine or imports torch itself; the simulator-only install skips it, saying why.
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch (the engine extra: pip install -e '.[engine]')")


def cuda_available() -> bool:
    if not HAS_TORCH:
        return False
    import torch

    return torch.cuda.is_available()


def needs(available: bool, what: str) -> None:
    """Skip a test whose tool is missing, saying what it needs; under CI (CI=true, as .ci/run runs) fail instead:
    CI installs what every test needs, so a skip there would hide a path users run."""
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI runs this test, and it needs {what}")
    pytest.skip(f"needs {what}")
