"""What the development set's vLLM points say about the causes of the planner's errors there: the same points
simulated with and without what the planner models of their engine (multi-step scheduling, whole runs), and
what is left (vLLM 0.7's DeepSeek-R1 on 8x H200: its KV pool and its step times). A section of docs/fidelity.md."""

from __future__ import annotations

from functools import cache

import numpy as np

from planner.fidelity.devset import MAX_BURST, compare, load_points, scenario_mapping, simulate_point, vendor

# How runs were cut before they were simulated whole: three rounds of a closed loop's users (at least 200
# requests), at most 512 requests of a burst. The rows below show what cutting did to the compared figures.
CUT_ROUNDS, CUT_MIN_REQUESTS = 3, 200
# vLLM V0 (0.7.4.dev) serving DeepSeek-R1 at tensor parallel 8 with its defaults (max_model_len 163840, no chunked
# prefill for MLA, FlashMLA's 64-token blocks, gpu_memory_utilization 0.9) logged "# cuda blocks: 5266" (4739 with
# the MLA cache's alignment padding it had before): vllm-project/vllm PR #14842 ("[Attention] Get rid of mla cache
# alignment", March 2025). The PR does not name the GPU; of eight GPUs that hold the fp8 weights (~80 GiB each),
# only an H200's 141 GB leaves a pool that small.
V0_DEEPSEEK_LOGGED_BLOCKS = 5266
V0_DEEPSEEK_ENGINE = {
    "max_model_len": 163840, "max_num_batched_tokens": 163840, "block_size": 64, "max_num_seqs": 256,
    "async_scheduling": False, "enable_chunked_prefill": False,
}  # fmt: skip
SERIES_TOKENS = 3200 + 800  # a request of the series compared: its prompt and its reply


def _vllm(point: dict) -> bool:
    return point["engine"] == "vllm"


def _cut(point: dict) -> int | None:
    """The requests a closed loop or burst was cut to, or None when it was not (or is not such a run)."""
    mapping, _ = scenario_mapping(point)
    if mapping is None or mapping["workload"]["arrival"]["process"] != "closed":
        return None
    sent, users = mapping["workload"]["num_requests"], mapping["workload"]["arrival"]["concurrency"]
    cut = min(sent, MAX_BURST) if users == sent else min(sent, max(CUT_MIN_REQUESTS, CUT_ROUNDS * users))
    return cut if cut < sent else None


def _median(errors: list[float]) -> str:
    from planner.fidelity.markdown import pct

    return pct(float(np.median(errors))) if errors else "-"


@cache
def rows() -> list[list[str]]:
    """One row per (cause, figure): the points it concerns, their median signed error without the cause
    modelled and with it (the development set's own run)."""
    from planner.fidelity.devset_summary import _one_per_figure, simulated_errors

    errors = _one_per_figure(simulated_errors())
    points = [p for p in load_points() if _vllm(p) and p["id"] in errors]
    out = []
    multi = [p for p in points if scenario_mapping(p)[0]["engine"].get("num_scheduler_steps", 1) > 1]
    without = {p["id"]: compare(p, simulate_point(p, changes={"engine": {"num_scheduler_steps": 1}})) for p in multi}
    without = _one_per_figure(without)
    for figure in ("ttft_ms_median", "tpot_ms_median", "e2e_ms_median", "output_throughput_tps"):
        ids = [p["id"] for p in multi if figure in errors[p["id"]]]
        out.append(
            ["multi-step scheduling (`--num-scheduler-steps 10`: engine.num_scheduler_steps)", "vLLM 0.6.0 (A100, H100)",
             figure, str(len(ids)), _median([without[i][figure] for i in ids]), _median([errors[i][figure] for i in ids])]
        )  # fmt: skip
    cut = {p["id"]: _cut(p) for p in points}
    cut_points = [p for p in points if cut[p["id"]]]
    for where in ("nvidia", "amd"):
        group = [p for p in cut_points if vendor(p) == where]
        cut_errors = {}
        for p in group:
            users = scenario_mapping(p)[0]["workload"]["arrival"]["concurrency"]
            burst = users == p["num_requests"]
            arrival = {"process": "closed", "concurrency": cut[p["id"]] if burst else users}
            cut_errors[p["id"]] = compare(
                p, simulate_point(p, changes={"workload": {"num_requests": cut[p["id"]], "arrival": arrival}})
            )
        cut_errors = _one_per_figure(cut_errors)
        for figure in ("output_throughput_tps", "ttft_ms_median", "tpot_ms_median"):
            ids = [p["id"] for p in group if figure in errors[p["id"]]]
            if ids:
                out.append(
                    ["whole runs (every request sent, not 3 rounds of a closed loop or 512 of a burst)",
                     f"vLLM on {where.upper()}", figure, str(len(ids)), _median([cut_errors[i][figure] for i in ids]),
                     _median([errors[i][figure] for i in ids])]
                )  # fmt: skip
    return out


def v0_deepseek_pool_blocks() -> int:
    """The KV pool the memory model gives vLLM V0's DeepSeek-R1 on 8x H200 at the settings of the logged run."""
    from planner.fidelity.devset import build_scenario
    from sim.engine_facts import EngineFacts
    from sim.memory import memory_breakdown

    point = next(p for p in load_points() if p["id"].startswith("dstack-dsr1-online-h200-vllm"))
    mapping, _ = scenario_mapping(point)
    mapping = mapping | {"engine": V0_DEEPSEEK_ENGINE}
    return memory_breakdown(EngineFacts.of(build_scenario(mapping))).num_gpu_blocks


def deepseek_h200() -> dict:
    """vLLM's DeepSeek-R1 points on 8x H200: how many there are of the V0 throughput points on NVIDIA, their median
    signed TPOT error, that error at each concurrency of the 3200-in/800-out series, and the requests running at
    once in its measured runs (throughput x TPOT / 1000)."""
    from planner.fidelity.devset import version_class
    from planner.fidelity.devset_summary import _one_per_figure, simulated_errors

    errors = _one_per_figure(simulated_errors())
    v0_nvidia = [
        p for p in load_points()
        if version_class(p) == "vllm-v0" and vendor(p) == "nvidia" and "output_throughput_tps" in errors.get(p["id"], {})
    ]  # fmt: skip
    deepseek = [p for p in v0_nvidia if "DeepSeek" in p["model"]]
    tpot = [errors[p["id"]]["tpot_ms_median"] for p in deepseek if "tpot_ms_median" in errors[p["id"]]]
    series = {
        int(p["max_concurrency"]): (errors[p["id"]]["tpot_ms_median"], p["output_throughput_tps"] * p["tpot_ms_median"] / 1e3)
        for p in deepseek
        if "-random-" in p["id"] and p.get("output_len") == 800 and p.get("max_concurrency")
    }  # fmt: skip
    return {"points": len(deepseek), "of": len(v0_nvidia), "tpot": tpot, "series": dict(sorted(series.items()))}


def section() -> list[str]:
    from planner.fidelity.markdown import pct, table

    blocks, block = v0_deepseek_pool_blocks(), V0_DEEPSEEK_ENGINE["block_size"]
    ds = deepseek_h200()
    series = ds["series"]
    by_users = ", ".join(f"{pct(e)} at {users}" for users, (e, _) in series.items())
    running = ", ".join(f"{held:.0f} at {users}" for users, (_, held) in series.items() if users >= 64)
    return [
        "### Causes found in the vLLM rows",
        "",
        (
            "Each row simulates the same points without the engine behaviour the planner now models for them (the"
            " `without` column) and with it (the development set's run above). Multi-step scheduling (vLLM V0's"
            " `--num-scheduler-steps`, `engine.num_scheduler_steps`): a batch of decodes runs that many steps from one"
            " schedule(), so a request arriving meanwhile waits for the block to end before its prompt runs, and the"
            " host schedules and prepares inputs once per block. Whole runs: a published throughput is the whole run's, ramp-up and"
            " ramp-down included, which a closed loop cut to three rounds or a burst cut to 512 requests does not"
            " reproduce."
        ),
        "",
        *table(["cause", "points", "figure", "n", "median signed without", "median signed with"], rows()),
        "",
        (
            f"What is left is mostly vLLM 0.7's DeepSeek-R1 on 8x H200, {ds['points']} of the {ds['of']} V0"
            f" throughput points on NVIDIA. Its step times: the median signed TPOT error of its {len(ds['tpot'])}"
            f" points is {pct(float(np.median(ds['tpot'])))}; over the 3200-in/800-out series by users {by_users}:"
            " as far off with 4 users (no queue, no KV limit) as with 64, so the decode step itself is priced too"
            " fast by a near-constant factor. The form has no measured MLA or block-fp8 MoE kernel to follow (the"
            " H100 profile it transfers from is bf16 dense layers), and the spread such a model carries says so"
            " (`MLA attention: no kernel measured` in its cost model's label, `unmeasured_attention` in"
            " planner/calibrations/measurements/spread.yaml). Its KV pool: at the"
            f" settings of a logged V0 run of the same model (tp 8, max_model_len 163840, 64-token blocks) the memory"
            f" model gives {blocks} blocks where vLLM logged {V0_DEEPSEEK_LOGGED_BLOCKS}"
            f" ({pct(blocks / V0_DEEPSEEK_LOGGED_BLOCKS - 1)}; vllm-project/vllm PR #14842, GPU not named: an H200 by"
            " its memory): V0's start-up accounting for MLA is not vLLM v1's, which the memory model follows, and"
            " no V0 log with every setting known was found to say which term differs. The measured runs hold"
            f" {running} requests at once by users (output throughput x TPOT): their pool, not max_num_seqs, bounds"
            " them, and the measured TTFT there is queueing. The logged pool holds"
            f" {V0_DEEPSEEK_LOGGED_BLOCKS * block // SERIES_TOKENS} of these {SERIES_TOKENS}-token requests, the"
            f" memory model's {blocks * block // SERIES_TOKENS}."
        ),
    ]
