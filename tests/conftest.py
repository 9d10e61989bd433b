"""Set before any test module imports `kernels`: Triton reads TRITON_INTERPRET when a kernel is decorated,
so without a CUDA device the kernel tests run through Triton's CPU interpreter. The live engine's CPU path
never calls Triton, so this changes nothing else."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
