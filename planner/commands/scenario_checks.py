"""The scenario a command names, loaded with its --set overrides, and why it cannot run: checked before any work."""

from __future__ import annotations

import sys

from planner.errors import PlannerError


def load_scenario_args(args):
    from planner.scenario.load import load_scenario

    return load_scenario(args.scenario, args.overrides)


def workload_problems(scenario) -> list[str]:
    """Why the workload cannot run; what clipping changed in it is said on stderr (warn_clipped)."""
    from sim.workload import generate_workload

    workload = generate_workload(scenario.workload, scenario.max_model_len)
    warn_clipped(scenario, workload)
    warn_prefix_cut(scenario, workload)
    if len(workload):
        return []
    return [
        (
            f"all {workload.num_rejected} requests are longer than max_model_len {scenario.max_model_len} and were"
            " rejected; raise engine.max_model_len or set workload.too_long: truncate"
        )
    ]


def warn_clipped(scenario, workload) -> None:
    """A normal or lognormal length whose clipping to [min, max] moved the mean (sim.workload_draws.CLIP_NOTICE): the
    user asked for one distribution and gets another, so it is said, not silently run."""
    for c in workload.clipped:
        d = getattr(scenario.workload, c.field)
        upper = "no max" if d.max is None else f"max {d.max:,}"
        print(
            f"planner: warning: {scenario.source}: workload.{c.field}: {d.dist} mean {d.mean:g} std {d.std:g} is"
            f" clipped to min {d.min:,} / {upper}: {c.share:.1%} of the draws, which moves their mean by"
            f" {c.mean_after - c.mean_before:+,.1f} tokens ({(c.mean_after - c.mean_before) / d.mean:+.1%} of the mean"
            f" asked), to {c.mean_after:,.1f}; a narrower std or other bounds keep the distribution asked for",
            file=sys.stderr,
        )


def warn_prefix_cut(scenario, workload) -> None:
    """A shared prefix longer than some prompts is their whole prompt (sim.workload: a prefix is part of the drawn
    prompt): said, with how many, as the run does not share what the user asked for there."""
    prefix = scenario.workload.shared_prefix
    if prefix is None or not len(workload):
        return
    cut = int((workload.prompt_tokens < prefix.tokens).sum())
    if cut:
        print(
            f"planner: warning: {scenario.source}: workload.shared_prefix.tokens {prefix.tokens:,} is longer than"
            f" {cut:,} of the {len(workload):,} prompts ({cut / len(workload):.1%}; mean prompt"
            f" {float(workload.prompt_tokens.mean()):,.1f} tokens): those share their whole prompt, fewer tokens than"
            " asked; a shorter prefix or longer prompts keep it",
            file=sys.stderr,
        )


def run_problems(scenario, facts) -> list[str]:
    """Why the simulated deployment cannot run: its engine (`facts`, sim.engine_facts.EngineFacts.of(scenario))
    does not fit, or its workload keeps no request."""
    from sim.engine_facts import EngineFacts
    from sim.memory import memory_breakdown
    from sim.memory_fit import fit_problems

    if scenario.fleet is not None:  # every pool must fit (facts: the first pool's, unused)
        problems = []
        for pool in scenario.fleet.pools:
            pool_facts = EngineFacts.of(scenario.pool_scenario(pool))
            problems += [f"pool {pool.name}: {p}" for p in fit_problems(pool_facts, memory_breakdown(pool_facts))]
        return problems + workload_problems(scenario)
    return fit_problems(facts, memory_breakdown(facts)) + workload_problems(scenario)


def refuse(scenario, problems: list[str]) -> None:
    if problems:
        raise PlannerError(f"{scenario.source}: cannot run: " + "; ".join(problems))
