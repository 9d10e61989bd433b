"""Kernel tests run on CPU through Triton's interpreter when there is no CUDA device: tests/conftest.py
sets TRITON_INTERPRET before any test imports kernels (kernels_testutil.require_triton skips, saying why,
if something imported them earlier)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def poison_empty():
    """Fill every torch.empty with NaN (ints with their max) so unwritten output fails a test."""
    saved = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.utils.deterministic.fill_uninitialized_memory = saved[1]
