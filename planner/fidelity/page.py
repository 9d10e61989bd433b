"""docs/fidelity.md: its header and its sections in order. `render` computes the whole page."""

from __future__ import annotations

from pathlib import Path

from planner.fidelity import data_parallel, devset_causes, devset_summary, kv_offload, lss, speculative
from planner.fidelity.allreduce import section_allreduce
from planner.fidelity.form import form_note, section_form
from planner.fidelity.profiles import section_models, section_profiles
from planner.fidelity.public_figures import section_public
from planner.fidelity.streaming import section_streaming, streaming_note
from planner.fidelity.transfer import section_leave_gpu_out, section_leave_models_out, section_transfer

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "fidelity.md"
COMMAND = "python -m planner.fidelity"

HEADER = f"""# Fidelity of the shipped calibrations

Produced by `{COMMAND}` (this page is its output; tests/test_fidelity.py keeps them equal). Data: Vidur's
public per-operator timings (microsoft/vidur, MIT licence; compact copy in `planner/calibrations/vidur/`),
fitted by `python -m planner.calibration.public_profiles`. Times are GPU time of the operators Vidur measured,
in float16; and LLMServingSim's public per-layer profiles of vLLM 0.19's kernels on an RTX 4090 and an RTX PRO
6000 Blackwell (MIT; `planner/calibrations/llmservingsim/`), in bfloat16, which also measure attention, the
fused MoE, the LM head and the sampler (compared below). The CPU side of a step is in neither: it keeps the
cost model's defaults until `planner calibrate` measures it. Every tracked figure on this page is held to a
stored bound by `python -m planner.fidelity --check` (CI runs it: tests/test_fidelity_gate.py).
"""


def _data():
    from planner.calibration.lss_data import operator_rows
    from planner.calibration.public_data import load_all_reduce

    return operator_rows(), load_all_reduce()


def render() -> str:
    ops, ar = _data()
    form_table, figures = section_form(ops, ar)
    form_section = [form_note(ar, figures), *form_table]
    parts = [
        HEADER,
        *section_profiles(ops, ar),
        "",
        *form_section,
        "",
        *section_streaming(ops),
        "",
        streaming_note(ops),
        *section_allreduce(ar),
        "",
        *section_models(ops, ar),
        "",
        *section_leave_gpu_out(ops, ar),
        "",
        *section_leave_models_out(ops, ar),
        "",
        *section_transfer(),
        "",
        *lss.section(),
        "",
        *section_public(),
        "",
        *kv_offload.section(),
        "",
        *speculative.section(),
        "",
        *data_parallel.section(),
        "",
        *devset_summary.section(),
        "",
        *devset_causes.section(),
    ]
    return "\n".join(parts).rstrip() + "\n"
