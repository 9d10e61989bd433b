"""A data-parallel run's lines in the summary: how the balancer spread the requests over the ranks and, for a
mixture of experts in lockstep, what set the steps (sim/data_parallel.py, sim/moe_group.py); a fleet's
data-parallel pools print the same for each of their groups (planner/outputs/fleet_summary.py)."""

from __future__ import annotations


def data_parallel_lines(s: dict) -> list[str]:
    dp, hw = s["data_parallel"], s["scenario"]["hardware"]
    per_rank = dp["requests_per_rank"]
    lines = [
        (
            f"Data parallel {dp['data_parallel_size']} ranks of {hw['tensor_parallel_size']} GPU(s): requests per rank"
            f" {min(per_rank):,} to {max(per_rank):,} (vLLM's DP balancer, 4 x waiting + running)"
        ),
        *group_lines(dp, s["scenario"]["engine"]["all2all_backend"]),
    ]
    if "serve" in dp:
        lines += ["Serve it with:", *(f"  {line}" for line in dp["serve"])]
    return lines


def group_lines(dp: dict, backend: str) -> list[str]:
    """What set a group's lockstep steps (none for independent ranks), indented two spaces."""
    lines = []
    if dp["lockstep_steps"] and "all2all_share" not in dp:  # measured: the live engine's in-process group
        lines.append(
            f"  lockstep: {dp['lockstep_steps']:,} steps, {dp['dummy_share']:.1%} of rank-steps with nothing to run"
            f" (no dummy batch computed here); {dp['dispatched_pairs']:,} (token, expert) pairs copied to another rank"
        )
    elif dp["lockstep_steps"]:
        lines.append(
            f"  lockstep MoE ({backend}): all-to-all {dp['all2all_share']:.1%} of step time, routed experts"
            f" {dp['experts_share']:.1%} (busiest GPU's expert load {dp['mean_imbalance']:.2f}x the mean);"
            f" {dp['dummy_share']:.1%} of rank-steps were dummy batches"
        )
    if "dbo_steps" in dp:  # engine.enable_dbo (sim/dual_batch.py)
        lines.append(dual_batch_line(dp))
    return lines


def dual_batch_line(dp: dict) -> str:
    """How many lockstep steps ran as two micro-batches and what that saved against running them whole."""
    saved = dp["dbo_saved_s"]
    return (
        f"  dual-batch overlap: {dp['dbo_steps']:,} of {dp['lockstep_steps']:,} steps as two micro-batches, which"
        f" {'saved' if saved >= 0 else 'cost'} {abs(saved):,.2f} s: {abs(dp['dbo_saved_share']):.1%} of the steps'"
        " time had they all run whole"
    )
