"""Where dual-batch overlap pays (docs/data-parallel-expert-parallel.md): one lockstep step of a data-parallel
group whose every rank runs the same batch, whole and as two micro-batches (sim/dual_batch.py), by tokens per rank,
priced with the coefficients `planner simulate` takes for the scenario. Not a comparison with a measurement: no
public benchmark isolates vLLM's dual-batch overlap at a stated batch (planner/fidelity/data_parallel.py lists the
deployments that overlap micro-batches, all disaggregated); it sits beside that page's evidence tables.

`python -m planner.fidelity.dual_batch SCENARIO [--set key=value ...]` (engine.enable_dbo is set on)."""

from __future__ import annotations

import argparse
import sys

from planner.calibration.resolve import resolve_cost_model
from planner.errors import EXIT_USAGE, PlannerError
from planner.fidelity.markdown import table
from planner.scenario.load import load_scenario
from sim.config import Scenario
from sim.cost_model import CostModel
from sim.dual_batch import DualBatch, DualBatchStep
from sim.engine_facts import EngineFacts
from sim.moe_group import MoeGroupCost
from sim.scheduler_output import SchedulerOutput

CONTEXT_TOKENS = 2000  # each decode row's context
BATCHES = ((32, True), (64, True), (128, True), (256, True), (512, True), (2048, False), (8192, False))


def uniform_step(cost: CostModel, num_ranks: int, tokens: int, decode: bool) -> tuple[float, DualBatchStep | None]:
    """(the step's device seconds whole, the step as two micro-batches or None where vLLM's thresholds keep it
    whole) when every rank runs `tokens` decodes of CONTEXT_TOKENS-token contexts, or one prompt chunk from 0."""
    rows = tokens if decode else 1
    context = CONTEXT_TOKENS * rows if decode else 0
    pairs = tokens * CONTEXT_TOKENS if decode else tokens * (tokens + 1) // 2
    out = SchedulerOutput(
        scheduled=[None] * rows, num_tokens=tokens, num_seqs=rows, num_sampled=rows, attention_pairs=pairs,
        sum_context_tokens=context,
    )  # fmt: skip
    moe = MoeGroupCost(cost)
    whole_s = cost.device_s(tokens, rows, rows, pairs, context) + moe.step([tokens] * num_ranks).total_s
    return whole_s, DualBatch(cost, moe).step([out] * num_ranks)


def dual_batch_rows(s: Scenario) -> list[list[str]]:
    coefficients, _ = resolve_cost_model(s)
    cost = CostModel(EngineFacts.of(s), coefficients)
    rows = []
    for tokens, decode in BATCHES:
        whole_s, split = uniform_step(cost, s.hardware.data_parallel_size, tokens, decode)
        batch = f"{tokens:,} decodes" if decode else f"{tokens:,}-token prompt chunk"
        if split is None:
            rows.append([batch, f"{whole_s * 1e3:,.1f}", "-", "-", "not split (below the threshold)", "-"])
            continue
        change = split.device_s / whole_s - 1
        rows.append(
            [
                batch,
                f"{whole_s * 1e3:,.1f}",
                f"{split.compute_s * 1e3:,.1f}",
                f"{split.all2all_s * 1e3:,.1f}",
                f"{split.device_s * 1e3:,.1f}",
                f"{change:+.0%}",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        s = load_scenario(args.scenario, ["engine.enable_dbo=true", *args.overrides])
    except PlannerError as e:
        print(f"planner: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    header = ["tokens per rank", "whole ms", "compute ms (2 halves)", "all-to-all ms (2 halves)", "split ms", "change"]
    print(f"{s.name}: one lockstep step, every rank the same batch (decodes of {CONTEXT_TOKENS:,}-token contexts)")
    print("\n".join(table(header, dual_batch_rows(s))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
