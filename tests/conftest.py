"""Set before any test module imports `kernels`: Triton reads TRITON_INTERPRET when a kernel is decorated,
so without a CUDA device the kernel tests run through Triton's CPU interpreter. The live engine's CPU path
never calls Triton, so this changes nothing else."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


import pytest


@pytest.fixture(autouse=True)
def _empty_profile_folder(tmp_path_factory, monkeypatch):
    """`calibration: auto` reads the user's profile folder: tests see an empty one, not the developer's."""
    monkeypatch.setenv("PLANNER_PROFILE_DIR", str(tmp_path_factory.mktemp("profiles")))
