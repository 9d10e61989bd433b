"""The development set simulated and summarised: per point its errors, per group (engine and version class,
vendor, figure) the median signed and absolute error, and the share of points the 90% intervals would cover.
`python -m planner.fidelity` prints these on docs/fidelity.md and `--check` holds them to their bounds."""

from __future__ import annotations

from collections import defaultdict
from functools import cache

import numpy as np

from planner.fidelity.devset import compare as compare_point
from planner.fidelity.devset import load_points, scenario_mapping, simulate_point, vendor, version_class

# The figures each group reports, in the table's order: throughput first (what sizing buys by).
FIGURES = ("output_throughput_tps", "ttft_ms_median", "tpot_ms_median", "e2e_ms_median")
ENGINE_CLASSES = ("vllm-v1", "vllm-v0", "sglang", "tensorrt-llm")


@cache
def simulated_errors() -> dict[str, dict[str, float]]:
    """point id -> {figure: signed relative error}; points that cannot be simulated are left out."""
    out = {}
    for point in load_points():
        summary = simulate_point(point)
        if summary is not None:
            out[point["id"]] = compare_point(point, summary)
    return out


def skipped() -> dict[str, str]:
    """point id -> why it is not simulated."""
    return {p["id"]: why for p in load_points() if scenario_mapping(p)[0] is None for why in [scenario_mapping(p)[1]]}


def group_of(point: dict) -> tuple[str, str]:
    return version_class(point), vendor(point)


def grouped(errors: dict[str, dict[str, float]]) -> dict[tuple[str, str, str], np.ndarray]:
    """(engine class, vendor, figure) -> the signed errors of that group's points."""
    by_group: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    points = {p["id"]: p for p in load_points()}
    for point_id, figures in errors.items():
        engine, where = group_of(points[point_id])
        for figure, error in figures.items():
            by_group[engine, where, _figure_class(figure)].append(error)
    return {k: np.asarray(v) for k, v in by_group.items()}


def _figure_class(figure: str) -> str:
    """A point publishes a median or a mean (or both); each counts once, the median where both are."""
    return figure.replace("_mean", "_median")


def tracked(errors: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """The development set's figures the gate holds (planner/fidelity/bounds.yaml): per group, the median
    |error| and the |median signed error| (systematic optimism or pessimism), as fractions."""
    errors = simulated_errors() if errors is None else errors
    out = {}
    for (engine, where, figure), e in sorted(grouped(_one_per_figure(errors)).items()):
        key = f"devset.{engine}.{where}.{figure}"
        out[key + ".median_abs"] = round(float(np.median(np.abs(e))), 4)
        out[key + ".median_signed_abs"] = round(abs(float(np.median(e))), 4)
    return out


def _one_per_figure(errors: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each point's errors with the median kept where both a mean and a median were published."""
    out = {}
    for point_id, figures in errors.items():
        kept = {}
        for figure, error in figures.items():
            median = figure.replace("_mean", "_median")
            if figure.endswith("_mean") and median in figures:
                continue
            kept[median] = error
        out[point_id] = kept
    return out


def section(errors: dict[str, dict[str, float]] | None = None) -> list[str]:
    from planner.fidelity.markdown import pct, table

    errors = simulated_errors() if errors is None else errors
    groups = grouped(_one_per_figure(errors))
    rows = []
    for engine in ENGINE_CLASSES:
        for where in ("nvidia", "amd"):
            for figure in FIGURES:
                e = groups.get((engine, where, figure))
                if e is None:
                    continue
                rows.append(
                    [engine, where, figure, str(len(e)), pct(float(np.median(e))), pct(float(np.median(np.abs(e)))),
                     pct(float(np.percentile(np.abs(e), 90)))]
                )  # fmt: skip
    lost = skipped()
    reasons = sorted(set(lost.values()))
    return [
        "## The development set: published serving measurements",
        "",
        (
            f"{len(load_points())} published measurements (`planner/calibrations/measurements/`, sources and caveats"
            " in SOURCES.md there), each simulated as the scenario it describes (`planner.fidelity.devset`) with the"
            " coefficients `calibration: auto` gives, and compared, never fitted: signed error = simulated /"
            " measured - 1, so a positive throughput error or a negative latency error is optimism. vLLM before"
            " 0.8 (its V0 engine) is simulated with `engine.async_scheduling: false`; SGLang and TensorRT-LLM as"
            " today's vLLM (the planner models vLLM: their rows show how far other engines differ). Where a point"
            " publishes a mean and a median, the median counts."
            f" Not simulated: {len(lost)} ({'; '.join(reasons)})."
        ),
        "",
        *table(["engine", "vendor", "figure", "points", "median signed", "median abs", "p90 abs"], rows),
    ]


def step_time_spreads(errors: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """The lognormal spreads (sigma of log step time) a transferred GPU carries where no profile measured its
    vendor or architecture (planner/calibration/transfer.py, `_unprofiled`):
    - other_vendor: the development set's vLLM points on AMD GPUs, |log(simulated / published TPOT)| (and of
      the published over the simulated throughput), their median: how far a prediction for another vendor's
      GPU, transferred from NVIDIA's profiles, lands from what was measured;
    - other_architecture: the leave-one-architecture-out folds' step errors (planner/calibrations/vidur/
      transfer_folds.yaml, rule other_architecture), their 90th percentile as 1.645 sigma;
    - unmeasured_attention: a model whose attention no profile measured (MLA), from the development set's
      vLLM DeepSeek-R1 points on NVIDIA GPUs, as other_vendor's."""
    from planner.calibration.transfer import FOLDS_PATH, load_yaml

    errors = simulated_errors() if errors is None else errors
    points = {p["id"]: p for p in load_points()}
    logs = []
    for point_id, figures in _one_per_figure(errors).items():
        point = points[point_id]
        if vendor(point) != "amd" or point["engine"] != "vllm":
            continue
        if "tpot_ms_median" in figures:
            logs.append(abs(np.log1p(figures["tpot_ms_median"])))
        if "output_throughput_tps" in figures:
            logs.append(abs(np.log1p(figures["output_throughput_tps"])))
    folds = [f for f in load_yaml(FOLDS_PATH)["folds"] if f["rule"] == "other_architecture"]
    p90 = max(f["step_p90_abs_error"] for f in folds)
    mla = []
    for point_id, figures in _one_per_figure(errors).items():
        point = points[point_id]
        if vendor(point) == "nvidia" and point["engine"] == "vllm" and "DeepSeek" in point["model"]:
            mla += [abs(np.log1p(figures[f])) for f in ("tpot_ms_median", "output_throughput_tps") if f in figures]
    return {
        "other_vendor": round(float(np.median(logs)), 3),
        "other_architecture": round(float(np.log1p(p90) / 1.645), 3),
        "unmeasured_attention": round(float(np.median(mla)), 3),
    }


def write_spreads(errors: dict[str, dict[str, float]] | None = None):
    import yaml

    from planner.calibration.transfer import SPREAD_PATH

    spreads = step_time_spreads(errors)
    header = (
        "# Written by `python -m planner.fidelity --write-spread` (planner/fidelity/devset_summary.py,\n"
        "# step_time_spreads): the step-time spread of a GPU whose vendor or architecture no profile measured.\n"
    )
    SPREAD_PATH.write_text(header + yaml.safe_dump(spreads, sort_keys=False), encoding="utf-8")
    return SPREAD_PATH
