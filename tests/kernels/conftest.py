"""Kernel tests run on CPU through Triton's interpreter when there is no CUDA device.

TRITON_INTERPRET is read when a kernel is decorated (module import), so it is set here, before any
test imports kernels (kernels_testutil.require_triton skips if something imported them earlier).
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def poison_empty():
    """Fill every torch.empty with NaN (ints with their max) so unwritten output fails a test."""
    saved = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.utils.deterministic.fill_uninitialized_memory = saved[1]
