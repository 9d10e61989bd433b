"""The bf16 tensor-core branch of paged attention (FP32_DOT=False), checked under the interpreter.

paged_attention takes `_fp32_dot` under TRITON_INTERPRET for bf16, because triton 3.9's interpreter runs
tl.dot on bf16 tiles as numpy matmul over their raw uint16 storage (integer products). So here the
interpreter's dot is replaced by what the GPU's tensor cores compute for bf16 inputs (each bf16 value
exactly widened to fp32, products accumulated in fp32) and the kernel is forced onto its bf16 branch: the
casts that branch adds (p rounded to bf16 before the PV dot, q and k fed to the dot unwidened) are then
checked against the reference, on CPU, before any GPU runs them. On CUDA the real tensor cores run it.
"""

import importlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.kernels import DEVICE, FULL, make_case, require_triton

require_triton()
from planner_kernels.paged_attention import _launch, paged_attention
from planner_kernels.paged_attention_config import MAX_SPLITS, LaunchConfig
from planner_kernels.reference import paged_attention_ref

pa = importlib.import_module("planner_kernels.paged_attention")  # the package exports a function of that name
HEAD_DIM = 128 if FULL else 16
DECODE = [(1, 1), (1, 17), (1, 70 if not FULL else 4097)]
MIXED = [(1, 33), (7, 7), (5, 40), (3, 70 if not FULL else 4097)]


@pytest.fixture
def bf16_tensor_core_dot(monkeypatch):
    """Force FP32_DOT=False for bf16; under the interpreter, give tl.dot tensor-core semantics for bf16."""
    monkeypatch.setattr(pa, "_fp32_dot", lambda dtype: dtype == torch.float32)
    if DEVICE == "cpu":
        from triton.runtime import interpreter

        original = interpreter.InterpreterBuilder.create_dot

        def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
            import triton.language as tl

            def widen(h):
                if h.dtype.scalar != tl.bfloat16:
                    return h
                data = interpreter._convert_float(h.data, tl.bfloat16, tl.float32, None).view(np.float32)
                return interpreter.TensorHandle(data, tl.float32)

            return original(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

        monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", create_dot)


@pytest.mark.parametrize("lens", [DECODE, MIXED], ids=["decode", "mixed"])
def test_bf16_dot_branch_matches_reference(bf16_tensor_core_dot, lens):
    case = make_case(lens, 8, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE)
    scale = 1 / math.sqrt(HEAD_DIM)
    out = paged_attention(*case.args(scale))
    torch.testing.assert_close(out, paged_attention_ref(*case.args(scale)), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("num_splits", [1, 3, MAX_SPLITS])
def test_bf16_dot_branch_split_and_prefill_configs(bf16_tensor_core_dot, num_splits):
    case = make_case(MIXED, 8, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE)
    scale = 1 / math.sqrt(HEAD_DIM)
    config = LaunchConfig(64 if num_splits == 1 else 16, 16, 4, 2)
    out = _launch(*case.args(scale), num_splits=num_splits, config=config)
    torch.testing.assert_close(out, paged_attention_ref(*case.args(scale)), atol=2e-2, rtol=2e-2)


@pytest.mark.skipif(DEVICE != "cpu", reason="the interpreter's own bf16 dot")
def test_the_interpreter_bf16_dot_is_why_the_branch_needs_this(monkeypatch):
    """Without the tensor-core stand-in the bf16 branch is wrong under the interpreter: the reason
    _fp32_dot avoids it there (if a triton release fixes its bf16 dot, this fails and the stand-in can go)."""
    monkeypatch.setattr(pa, "_fp32_dot", lambda dtype: dtype == torch.float32)
    case = make_case([(1, 17), (3, 20)], 8, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE)
    out = paged_attention(*case.args(0.25))
    assert not torch.allclose(out.float(), paged_attention_ref(*case.args(0.25)).float(), atol=0.1, rtol=0.1)
