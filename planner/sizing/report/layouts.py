"""What sets a data-parallel candidate's steps, at its share of the demand: the lockstep group's all-to-all and
routed experts' shares of the step time, the busiest GPU's expert load over the mean, and the rank-steps that
were dummy batches (sim/data_parallel.py, sim/moe_group.py), so a buyer sees where a layout's time goes."""

from __future__ import annotations

from planner.sizing.search import SizingResult


def data_parallel_lines(out: SizingResult) -> list[str]:
    """One line per simulated data-parallel candidate with a run at the demand, in candidate order."""
    unit = out.question.search.demand.unit
    lines = []
    for r in out.evaluated:
        run = r.evaluation.at_demand
        if run is None or run.data_parallel is None:
            continue
        dp = run.data_parallel
        head = f"{r.candidate.label} at {run.load:,.4g} {unit} per replica:"
        if not dp["lockstep_steps"]:  # ranks without expert parallel step on their own
            lines.append(f"{head} ranks step independently (no expert-parallel MoE layers to wait for)")
            continue
        backend = r.candidate.scenario.engine.all2all_backend
        lines.append(
            f"{head} all-to-all ({backend}) {dp['all2all_share']:.1%} of step time, routed experts"
            f" {dp['experts_share']:.1%} (busiest GPU's expert load {dp['mean_imbalance']:.2f}x the mean),"
            f" {dp['dummy_share']:.1%} of rank-steps dummy batches"
        )
    return lines
