"""The peak rates a step is priced against: the dense tensor-core (or, for float32, plain FP32) FLOP/s of the
engine's GPU for the model's dtype, and the linear layers' own (fp8 weights run at the fp8 rate)."""

from __future__ import annotations

from sim.engine_facts import EngineFacts
from sim.errors import StepTimeError


def peak_flops(facts: EngineFacts) -> float:
    """Dense peak for the model dtype: the fp16/bf16 tensor cores, or for float32 the FP32 rate without them
    (PyTorch's and vLLM's default float32 matmul precision uses no TF32: an H100 runs 67 TFLOPS, not the half of
    its 989 bf16 TFLOPS once assumed here)."""
    gpu = facts.gpu
    if facts.dtype != "float32":
        return gpu.bf16_tflops * 1e12
    if gpu.fp32_tflops is None:
        raise StepTimeError(
            f"dtype float32 needs the GPU's fp32_tflops (its FP32 peak without tensor cores, where float32 matmuls"
            f" run by default); GPU {gpu.name} has none: give hardware.gpu.fp32_tflops, or use bfloat16/float16"
        )
    return gpu.fp32_tflops * 1e12


def linear_peak_flops(facts: EngineFacts) -> float:
    """The linear layers' peak: the fp8 tensor rate for fp8 weights (vLLM's W8A8 fp8 GEMMs quantise the
    activations on the fly) where the GPU has one. MXFP4 weights on a GPU with FP4 tensor cores (Blackwell,
    CDNA 4) run vLLM's MXFP4 x MXFP8 MoE kernels (FlashInfer / CUTLASS on Blackwell: the activations quantised
    to fp8), so the fp8 rate; elsewhere int4/MXFP4 kernels dequantise to bf16 (W4A16, Marlin-style) and run at
    the dtype's rate."""
    gpu, method = facts.gpu, facts.model.quant_method
    if method == "fp8" and gpu.fp8_tflops:
        return gpu.fp8_tflops * 1e12
    if method == "mxfp4" and gpu.fp4_tflops and gpu.fp8_tflops:
        return gpu.fp8_tflops * 1e12
    return peak_flops(facts)
