"""Kernel tests run on CPU through Triton's interpreter when there is no CUDA device: tests/conftest.py sets
TRITON_INTERPRET before any test imports planner_kernels (helpers.kernels.require_triton skips, saying why, if
something imported them earlier). Without torch the kernel tests skip (each module imports it with importorskip)."""

import importlib.util

import pytest


@pytest.fixture(autouse=True)
def poison_empty():
    """Fill every torch.empty with NaN (ints with their max) so unwritten output fails a test."""
    if importlib.util.find_spec("torch") is None:
        yield
        return
    import torch

    saved = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.utils.deterministic.fill_uninitialized_memory = saved[1]
