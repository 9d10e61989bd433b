"""How close to the spec bandwidth the kernels stream at decode batch sizes, against the profiles'
bandwidth_efficiency (which attention inherits in the cost model)."""

from __future__ import annotations

import numpy as np

from planner.fidelity.markdown import table


def section_streaming(ops) -> list[str]:
    """How close to the spec bandwidth the kernels stream at decode batch sizes (1-8 tokens)."""
    from planner.calibration import public_fit as pf
    from planner.calibration.shipped import profiled_pairs
    from planner.calibration.transfer import load_profile

    out = [
        (
            "Weights streamed per second at decode batch sizes (1-8 tokens), as a fraction of the spec bandwidth, "
            "median over models: the four linear kernels alone, and the whole layer; beside it the "
            "profile's bandwidth_efficiency, which attention inherits in the cost model."
        ),
        "",
    ]
    rows = []
    for gpu, tp in profiled_pairs():
        b = pf.batch([r for r in ops if r.gpu == gpu and r.tensor_parallel_size == tp and r.num_tokens <= 8])
        nbytes = b.params_per_layer * pf.DTYPE_BYTES / b.tensor_parallel_size
        linear = float(np.median(nbytes / b.linear_s / b.bandwidth))
        layer = float(np.median(nbytes / b.layer_s / b.bandwidth))
        fitted = load_profile(gpu, tp)["coefficients"]["bandwidth_efficiency"]
        rows.append([gpu, tp, f"{linear:.3f}", f"{layer:.3f}", f"{fitted:.3f}"])
    out += table(["GPU", "tp", "linears", "whole layer", "profile's bandwidth_efficiency"], rows)
    return out


STREAMING_NOTE = """The 2-norm's bandwidth_efficiency is what the fit finds for the linears' weight reads once launches
are priced apart; attention inherits it in the cost model (no data here measure attention). At tp 1 it is
{tp1} of the spec bandwidth, against {streaming} streamed by the linear kernels alone at 1-8 tokens (first
column).
"""


def streaming_note(ops) -> str:
    from planner.calibration import public_fit as pf
    from planner.calibration.shipped import PROFILED_GPUS
    from planner.calibration.transfer import load_profile

    tp1, streaming = [], []
    for g in PROFILED_GPUS:
        tp1.append(f"{load_profile(g, 1)['coefficients']['bandwidth_efficiency']:.2f} ({g})")
        b = pf.batch([r for r in ops if r.gpu == g and r.tensor_parallel_size == 1 and r.num_tokens <= 8])
        streaming.append(f"{np.median(b.params_per_layer * pf.DTYPE_BYTES / b.linear_s / b.bandwidth):.2f}")
    return STREAMING_NOTE.format(tp1=", ".join(tp1), streaming=", ".join(streaming))
