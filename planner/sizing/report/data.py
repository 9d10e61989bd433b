"""The sizing result as JSON data (`planner size --json`, sizing.json)."""

from __future__ import annotations

import dataclasses

from planner.outputs.results import _finite
from planner.sizing.rank import Ranking
from planner.sizing.report import interval_tables, tables
from planner.sizing.search import Result, SizingResult, median_simulation_s
from planner.sizing.serve import vllm_serve_command


def _result(r: Result) -> dict:
    ev = r.evaluation
    return {
        "label": r.candidate.label,
        "gpu": r.candidate.gpu.name,
        "tensor_parallel_size": r.candidate.tensor_parallel_size,
        "data_parallel_size": r.candidate.data_parallel_size,
        "expert_parallel": r.candidate.expert_parallel,
        "gpus_per_replica": r.candidate.num_gpus,
        "dtype": r.candidate.dtype,
        # a swept engine.speculative is a config (its fields, as summary.json's scenario writes them), or null
        "settings": {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in r.candidate.settings},
        "provenance": r.candidate.provenance,
        "provenance_kind": r.candidate.provenance_kind,
        "meets_slos": r.meets,
        "note": r.note,
        "analytic": dataclasses.asdict(r.analytic),
        "tpot_floor_ms": r.tpot_floor_ms,
        "memory": r.memory,
        "capacity_per_replica": ev.capacity.load if ev else None,
        # out of probes before a failing load close above it: at least this much (planner/sizing/capacity.py)
        "capacity_is_lower_bound": ev.capacity.lower_bound if ev else None,
        "replicas": ev.replicas if ev else None,
        "probes": [p.to_dict() for p in ev.capacity.probes] if ev else [],
        "at_demand": ev.at_demand.to_dict() if ev and ev.at_demand else None,
        "costs": r.costs.to_dict() if r.costs else None,
        "objective_usd_per_month": r.objective_usd_per_month,
        "vllm_serve": vllm_serve_command(r.candidate.scenario),
        "intervals": r.intervals,  # --intervals N: 90% intervals (planner/sizing/intervals.py); else None
    }


def sizing_data(out: SizingResult, ranking: Ranking) -> dict:
    d = out.question.search.demand
    return _finite(
        {
            "name": out.question.scenario.name,
            "source": out.question.source,
            "demand": dataclasses.asdict(d),
            "objective": out.question.search.money.objective,
            "answer": tables.answer(out, ranking),
            "too_long": cut[0] if (cut := tables.too_long(out)) else None,  # requests the scenario drops or cuts
            "recommended": ranking.recommended.candidate.label if ranking.recommended else None,
            "closest": ranking.closest[0].candidate.label if ranking.closest else None,
            "pareto_front": [r.candidate.label for r in ranking.front],
            "runner_ups": [{"label": r.candidate.label, "why": why} for r, why in ranking.runner_ups],
            "per_gpu": tables.gpu_verdicts(out, ranking),
            "candidates": [_result(r) for r in out.results],
            "cannot_run": [dataclasses.asdict(p) for p in out.pruned],
            "num_simulations": out.num_simulations,
            "median_simulation_s": median_simulation_s(out),
            "wall_s": out.wall_s,
            "workers": out.workers,
            "backend": out.backend,
            "intervals": _intervals(out),
        }
    )


def _intervals(out: SizingResult) -> dict | None:
    if not out.interval_runs:
        return None
    return {
        "runs": out.interval_runs,
        "interval": "90%",
        "candidates": [r.candidate.label for r in interval_tables.interval_results(out)],
        "notes": interval_tables.interval_notes(out),
        "num_simulations": out.interval_simulations,
        "wall_s": out.interval_wall_s,
    }
