"""README.md's accuracy table, summarised from docs/fidelity.md and docs/vllm-fidelity.md (the pages their
own generators keep: `python -m planner.fidelity`, `python docs/vllm_fidelity.py`). Run by docs/make_docs.py."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ACCURACY_TABLE = re.compile(r"<!-- accuracy table: .*? -->\n(?:\|[^\n]*\n)+", re.DOTALL)


def _span(values: list[float], unit: str = "%") -> str:
    lo, hi = min(values), max(values)
    return f"{lo:g}{unit}" if lo == hi else f"{lo:g}-{hi:g}{unit}"


def _pct(cell: str) -> float:
    return float(re.match(r"[+-]?[\d.]+", cell.replace("**", "").strip())[0])


ENGINE_NAMES = {"vllm-v0": "vLLM V0", "vllm-v1": "vLLM V1"}  # the development set's version classes


def accuracy_rows() -> list[str]:
    """The accuracy table: what the predictions were checked against, and the error."""
    fidelity = (REPO / "docs" / "fidelity.md").read_text(encoding="utf-8")
    profiles = _first_table(fidelity, "## Shipped profiles")
    met = sum(1 for r in profiles if r["target met"] == "yes")
    steps = [_pct(r["step median"]) for r in profiles]
    steps_p90 = [_pct(r["step p90"]) for r in profiles]
    spec = [_pct(r["spec-sheet step med / p90"].split("/")[0]) for r in profiles]
    folds = _first_table(fidelity, "## Leave-one-GPU-out")
    fold_layers = [_pct(r["layer median"]) for r in folds]
    public = _first_table(fidelity, "## Public end-to-end figures")
    public_errors = [_pct(r["error"]) for r in public]
    vllm = (REPO / "docs" / "vllm-fidelity.md").read_text(encoding="utf-8")
    logs = _first_table(vllm, "## Start-up logs")
    counted = [_pct(r["error"]) for r in logs if r["counts"] == "yes"]
    other = [_pct(r["error"]) for r in logs if r["counts"] != "yes"]
    kv = [_pct(r["error"]) for r in _first_table(vllm, "## KV per token")]
    kernels = _first_table(fidelity, "## vLLM 0.19's kernels")
    attention = [_pct(r["median"]) for r in kernels if r["term"] == "attention, the simulator's"]
    speculative = [
        r for r in _first_table(fidelity, "## Speculative decoding") if r["simulated TPOT ms"] != "not simulated"
    ]
    eagle = {m: [_pct(r["error"]) for r in speculative if r["run"].startswith(m + " ")] for m in ("eagle", "eagle3")}
    # DeepEP's table names two columns "error" (dispatch's, combine's): read by position
    deepep_errors = [
        _pct(c) for r in _table_cells(fidelity, "## Data parallel with expert parallel")[2:] for c in r[3::3]
    ]
    fleets = _first_table(fidelity, "Simulated as fleets of a prefill and a decode DP + EP group")
    fleet_errors = [_pct(r["error"]) for r in fleets]
    offload = _first_table(fidelity, "## KV offloading")
    offload_errors = [_pct(r["error (coefficients)"]) for r in offload if r["simulated ms"] != "not simulated"]
    devset = _first_table(fidelity, "## The development set")
    vllm_throughput = [
        f"{_signed(_pct(r['median signed']))} ({ENGINE_NAMES[r['engine']]} on {r['vendor'].upper()}, {_count(r['points'], 'point')})"
        for r in devset
        if r["engine"].startswith("vllm") and r["figure"] == "output_throughput_tps"
    ]
    return [
        "| what is predicted | checked against | error | where |",
        "| --- | --- | --- | --- |",
        (
            f"| a step's GPU time, shipped profiles (A100, A40, H100 at tp 1-8; RTX 4090, RTX PRO 6000 at tp 1-2) |"
            " Vidur's and LLMServingSim's measured operators | median"
            f" {_span(steps)}, p90 {_span(steps_p90)}; target 5% / 10% met by {met} of {len(profiles)}"
            f" (spec-sheet defaults: median {_span(spec)}) | [fidelity](docs/fidelity.md#shipped-profiles-fit-quality-on-their-own-measurements) |"
        ),
        (
            f"| a layer's time on a GPU never profiled (transfer) | the held-out GPU's measurements | median"
            f" {_span(fold_layers)} over {len(folds)} folds | [fidelity](docs/fidelity.md#leave-one-gpu-out-the-honest-error-of-transfer) |"
        ),
        (
            f"| attention's time per layer (vLLM 0.19's kernels) | LLMServingSim's measured grids |"
            f" median {_span(attention)} over {len(attention)} GPU, model and tp bundles |"
            " [fidelity](docs/fidelity.md#vllm-019s-kernels-attention-fused-moe-lm-head-and-sampler-llmservingsims-profiles) |"
        ),
        (
            f"| output throughput of published vLLM deployments (development set) | published measurements |"
            f" median signed {', '.join(vllm_throughput)}: the planner is too fast there |"
            " [fidelity](docs/fidelity.md#the-development-set-published-serving-measurements) |"
        ),
        (
            f"| throughput and latency end to end | {len(public)} published TensorRT-LLM and vLLM figures |"
            f" {_signed(min(public_errors))} to {_signed(max(public_errors))} | [fidelity](docs/fidelity.md#public-end-to-end-figures) |"
        ),
        (
            f"| TPOT with speculative decoding at batch 1 (Llama-3.1-8B, H100, k = 2-7) | vLLM's published EAGLE and"
            f" EAGLE-3 runs (vllm-project/vllm#20780) | EAGLE {_signed(min(eagle['eagle']))} to"
            f" {_signed(max(eagle['eagle']))}, EAGLE-3 {_signed(min(eagle['eagle3']))} to {_signed(max(eagle['eagle3']))}:"
            " the planner is too fast; drafting is not calibrated on any GPU |"
            " [fidelity](docs/fidelity.md#speculative-decoding-public-measurements) |"
        ),
        (
            f"| data parallel + expert parallel: an all-to-all call; prefill/decode fleets' tokens/s per node |"
            f" DeepEP's kernel table ({len(deepep_errors)} calls); DeepSeek's and LMSYS's deployments"
            f" ({len(fleet_errors)} figures) | call latency {_signed(min(deepep_errors))} to {_signed(max(deepep_errors))};"
            f" tokens/s {_signed(min(fleet_errors))} to {_signed(max(fleet_errors))} (spec-sheet, assumed lengths and"
            " batch): too fast in one node and on DeepSeek's H800s |"
            " [fidelity](docs/fidelity.md#data-parallel-with-expert-parallel-public-measurements) |"
        ),
        (
            f"| TTFT of a 15k-token prompt with an LMCache CPU or disk tier configured, computed and found cached |"
            f" LMCache's documented runs ({len(offload_errors)} figures) |"
            f" {_signed(min(offload_errors))} to {_signed(max(offload_errors))}: the planner is too fast |"
            " [fidelity](docs/fidelity.md#kv-offloading-public-measurements) |"
        ),
        (
            f"| the KV pool at start-up (`num_gpu_blocks`) | vLLM >= 0.21 start-up logs with every setting known |"
            f" {', '.join(map(_signed, counted))} ({len(counted)} log; {len(other)} older ones account memory otherwise:"
            f" {_signed(min(other))} to {_signed(max(other))}) | [vLLM fidelity](docs/vllm-fidelity.md#start-up-logs) |"
        ),
        (
            f"| KV bytes per token | vLLM logs that state them | {_signed(min(kv))} to {_signed(max(kv))} ({len(kv)} logs) |"
            " [vLLM fidelity](docs/vllm-fidelity.md#kv-per-token) |"
        ),
    ]


def _count(number: str, noun: str) -> str:
    return f"{number} {noun}" if number == "1" else f"{number} {noun}s"


def _signed(value: float) -> str:
    return f"{value:+g}%"


def _table_cells(text: str, heading: str) -> list[list[str]]:
    """The cells of the first table after heading, row by row (its header and separator rows included)."""
    start = text.index(heading)
    lines = text[start:].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in line.strip().strip("|").split("|")])
    return table


def _first_table(text: str, heading: str) -> list[dict[str, str]]:
    table = _table_cells(text, heading)
    header, body = table[0], table[2:]
    return [dict(zip(header, row)) for row in body]


def refresh_accuracy(text: str, rows: list[str], link_prefix: str) -> str:
    """text with its accuracy table (after its marker comment) replaced; links relative to the page."""
    table = "\n".join(rows).replace("(docs/", f"({link_prefix}") + "\n"
    return ACCURACY_TABLE.sub(lambda m: m[0].split("\n", 1)[0] + "\n" + table, text)
