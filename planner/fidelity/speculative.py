"""Speculative decoding against public measurements: `python -m planner.fidelity.speculative` prints the table
docs/speculative-decoding.md includes.

The measurements were listed here, with their settings, before anything was simulated against them; nothing in
the cost model or the acceptance defaults was changed after seeing the errors. Each simulated row runs the
planner's own scenario for the measurement's settings (what a measurement leaves unstated is assumed and said in
its row); the acceptance is the one the same run reported (its mean acceptance length at that k), so the error is
the cost model's, not the drafter's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner.fidelity.markdown import table

# The heads, as their config.json gives them (Hugging Face): one Llama decoder layer each, on Llama-3.1-8B's
# hidden states. EAGLE-1 shares the target's LM head; EAGLE-3 has its own over a 32,000-token draft vocabulary.
HEAD = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 2048,
}
EAGLE1_HEAD = {"name": "EAGLE-LLaMA3.1-Instruct-8B", **HEAD}
EAGLE3_HEAD = {"name": "EAGLE3-LLaMA3.1-Instruct-8B", **HEAD, "draft_vocab_size": 32000}


@dataclass(frozen=True)
class Measurement:
    """One published figure with its settings; `simulated` False says why it is listed only."""

    source: str
    setting: str
    method: str | None  # None: no speculation (the baseline)
    k: int
    acceptance_length: float | None  # the run's own mean acceptance length at this k
    tpot_ms: float | None  # None: the source reports another figure (said in why_not)
    simulated: bool = True
    why_not: str = ""


# vllm-project/vllm#20780 (ekagra-ranjan, 2025-07-10): Llama-3.1-8B-Instruct, MT-bench, batch size 1, vLLM V1,
# mean acceptance length (AL) and TPOT for EAGLE-1 and EAGLE-3 at K = 2..7, and the vanilla TPOT. The issue does not
# name the GPU; the same author's runs of the same script in vllm-project/vllm#16937 (comment of 2025-04-24, "Output
# tokens/s on H100 BS1": `examples/offline_inference/eagle.py --dataset mt_bench/question.jsonl --max_num_seqs 1
# --num_prompts 80`) are on an H100: assumed an H100 SXM. Prompts: MT-bench's first turns in Llama-3's chat template,
# assumed 100 tokens; replies: that script's max_tokens 256, greedy, assumed all 256 long.
BS1 = "Llama-3.1-8B-Instruct, H100 (assumed SXM), MT-bench, batch 1"
_AL = {
    "eagle": (2.10, 2.29, 2.39, 2.43, 2.45, 2.47),
    "eagle3": (2.36, 2.79, 3.08, 3.32, 3.46, 3.54),
}
_TPOT = {
    "eagle": (4.37, 4.29, 4.48, 4.71, 4.94, 5.20),
    "eagle3": (4.32, 4.09, 4.05, 4.13, 4.20, 4.29),
}
UNSTATED = "the GPU, the dataset and the lengths are not stated; vLLM V0's engine"
SGLANG = "SGLang docs, speculative decoding"
REDHAT_EAGLE3 = "Red Hat Developer, Fly EAGLE3 fly (2025-07-01)"
REDHAT_GPT_OSS = "Red Hat Developer, speculative decoding in vLLM for gpt-oss"
SGLANG_SETTING = "Llama-3.1-8B-Instruct, 1x H100, MT-bench, 1000 / tokens/s"
SGLANG_WHY = "SGLang's engine and its EAGLE tree drafts (top-k and draft tokens not stated): vLLM serves chains"
MEASUREMENTS = [
    Measurement("vllm-project/vllm#20780", BS1, None, 0, None, 7.07),
    *(
        Measurement("vllm-project/vllm#20780", BS1, method, k, _AL[method][k - 2], _TPOT[method][k - 2])
        for method in ("eagle", "eagle3")
        for k in range(2, 8)
    ),
    # SGLang's speculative-decoding docs (docs/backend/speculative_decoding, after the EAGLE-3 paper, arXiv
    # 2503.01840): Llama-3.1-8B-Instruct on one H100, MT-bench, 158.34 tokens/s without speculation, 373.25 with
    # EAGLE-3 (244.10 with EAGLE-2), as one request's decode speed: TPOT = 1000 / tokens/s. Listed 2026-12-07, after
    # the rows above had been simulated; the paper's batch-size tables were not available here.
    *(
        Measurement(SGLANG, SGLANG_SETTING, method, 0, None, round(1000 / tps, 2), False, SGLANG_WHY)
        for method, tps in ((None, 158.34), ("eagle3", 373.25))
    ),
    # Red Hat Developer, "Fly, EAGLE3, fly: Faster inference with vLLM & speculative decoding" (2025-07-01) and
    # "Performance improvements with speculative decoding in vLLM for gpt-oss" (gpt-oss-120B with an EAGLE-3 head on
    # H200s, ShareGPT, MLPerf and SWE-bench, two tensor-parallel sizes, up to 200 concurrent requests). Listed
    # 2026-12-07 from their summaries; the per-figure settings were not in the text available here.
    Measurement(
        REDHAT_EAGLE3,
        "vLLM with EAGLE-3 heads, several models and request rates",
        "eagle3",
        0,
        None,
        None,
        False,
        "reports up to 2.5x faster across its scenarios, most in synchronous use: the per-figure GPU,"
        " acceptance and lengths are not in the text available here",
    ),
    Measurement(
        REDHAT_GPT_OSS,
        "gpt-oss-120B, H200, ShareGPT / MLPerf / SWE-bench, up to 200 concurrent",
        "eagle3",
        0,
        None,
        None,
        False,
        "reports output throughput +10-21% and E2E latency -12-20% with 2-3 draft"
        " tokens at up to 200 concurrent requests: acceptance lengths and request lengths per figure are not"
        " in the text available here",
    ),
    # vllm-project/vllm#12755 (DeepSeek MTP in vLLM V0, 2025-02): DeepSeek-R1, tensor parallel 8, MTP k = 1, draft
    # tp 1, acceptance 81-82.3%: TPOT 55.47 -> 33.99 ms at 1 QPS, 57.58 -> 48.8 ms at 2 QPS.
    *(
        Measurement("vllm-project/vllm#12755", "DeepSeek-R1, tp 8, 1 QPS", method, k, length, tpot, False, UNSTATED)
        for method, k, length, tpot in (("mtp", 1, 1.815, 33.99), (None, 0, None, 55.47))
    ),
]


def _scenario(m: Measurement):
    """The planner's scenario for a #20780 row: Llama-3.1-8B on an H100 SXM, one request at a time, 80 requests of
    100 prompt and 256 reply tokens, the head and the acceptance length of the row."""
    from planner.scenario.load import validate_mapping

    engine: dict = {"max_model_len": 2048, "max_num_seqs": 1}
    if m.method is not None:
        head = EAGLE3_HEAD if m.method == "eagle3" else EAGLE1_HEAD
        engine["speculative"] = {
            "method": m.method,
            "num_speculative_tokens": m.k,
            "model": head,
            "synthetic_acceptance_length": m.acceptance_length,
        }
    data = {
        "name": f"{m.method or 'vanilla'} k={m.k}",
        "model": "llama-3.1-8b",
        "dtype": "bfloat16",
        "hardware": {"gpu": "h100-sxm"},
        "engine": engine,
        "workload": {
            "num_requests": 80,
            "seed": 0,
            "arrival": {"process": "closed", "concurrency": 1},
            "prompt_tokens": {"dist": "fixed", "value": 100},
            "output_tokens": {"dist": "fixed", "value": 256},
        },
    }
    return validate_mapping(data, "planner.fidelity.speculative", Path.cwd())


def _what(m: Measurement) -> str:
    if m.method is None:
        return "vanilla"
    if m.acceptance_length is None:  # a published run that states neither its k nor its acceptance
        return f"{m.method} (k and AL not stated)"
    return f"{m.method} k={m.k} (AL {m.acceptance_length:g})"


def simulated_tpot_ms(m: Measurement) -> float:
    """The planner's mean TPOT for a simulated measurement's setting."""
    from sim.driver import simulate
    from sim.metrics import summarize

    scenario = _scenario(m)
    return summarize(simulate(scenario, record_steps=False).recorder, scenario.slo)["mean_tpot_ms"]


def rows() -> list[list[str]]:
    """One row per listed measurement: its settings, the measured TPOT, the simulated one and the error."""
    out = []
    for m in MEASUREMENTS:
        if not m.simulated:
            measured = "not stated" if m.tpot_ms is None else f"{m.tpot_ms:g}"
            out.append([m.source, m.setting, _what(m), measured, "not simulated", m.why_not])
            continue
        simulated = simulated_tpot_ms(m)
        error = (simulated - m.tpot_ms) / m.tpot_ms
        out.append([m.source, m.setting, _what(m), f"{m.tpot_ms:g}", f"{simulated:.2f}", f"{error:+.1%}"])
    return out


def tracked() -> dict[str, float]:
    """The fidelity gate's figures (planner/fidelity/gate.py): each simulated row's absolute TPOT error."""
    return {
        f"speculative.{m.method or 'vanilla'}.k{m.k}.tpot.abs": round(abs(simulated_tpot_ms(m) / m.tpot_ms - 1), 4)
        for m in MEASUREMENTS
        if m.simulated
    }


def render() -> str:
    """The table, and the median and largest absolute error of the simulated rows."""
    table_rows = rows()
    errors = sorted(abs(float(r[5].rstrip("%"))) for r in table_rows if r[4] != "not simulated")
    lines = table(["source", "setting", "run", "measured TPOT ms", "simulated TPOT ms", "error"], table_rows)
    median = (
        errors[len(errors) // 2] if len(errors) % 2 else sum(errors[len(errors) // 2 - 1 : len(errors) // 2 + 1]) / 2
    )
    lines += ["", f"{len(errors)} simulated: median absolute error {median:.1f}%, largest {errors[-1]:.1f}%."]
    return "\n".join(lines) + "\n"


def section() -> list[str]:
    """docs/fidelity.md's section: the table and what it measures."""
    return [
        "## Speculative decoding: public measurements",
        "",
        (
            "Listed with their settings in `planner/fidelity/speculative.py` before any was simulated (`python -m "
            "planner.fidelity.speculative` prints the table; docs/speculative-decoding.md says what the rows measure). "
            "Each speculative row is simulated with the run's own mean acceptance length, so its error is the cost "
            "model's, not the drafter's acceptance; drafting is priced from the drafter's facts alone (no GPU "
            "calibration of drafting exists): a negative TPOT error is optimism."
        ),
        "",
        *render().rstrip("\n").split("\n"),
    ]


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
