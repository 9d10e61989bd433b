"""Whether the Triton kernels can run here.

This folder is imported as `planner_kernels` (pyproject.toml maps it) and has no `__init__.py` on purpose:
Hugging Face's `kernels` distribution, which transformers imports whenever a model class is touched, owns
the import name `kernels`. A regular package named `kernels` in a checkout would shadow it whenever the
checkout's root is on sys.path (`python -m ...` run there); a folder without `__init__.py` never wins over
an installed regular package, so the two cannot collide.

Each kernel module holds a `@triton.jit` kernel and its wrapper; reference.py holds the pure-torch
references and needs torch alone. Under TRITON_INTERPRET=1 (set before a kernel module is imported) the
kernels run on CPU tensors.
"""

import importlib.util
import os

import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None


def triton_available() -> bool:
    """True when triton imports and can run: a CUDA device, or the CPU interpreter (TRITON_INTERPRET=1)."""
    return HAS_TRITON and (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1")
