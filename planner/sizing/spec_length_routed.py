"""The sizing file's `search.length_routed` section: two pools behind a router that sends prompts up to a threshold to
one and longer ones to the other (the fleet's `router.policy: length`, as inference-fleet-sim studies), weighed
against the aggregated candidates; read with the scenario's message shape.

    search:
      length_routed:
        short: {gpus: [l40s, h100-sxm], tensor_parallel_sizes: [1]}   # default: the scenario's GPU and size
        long: {gpus: [h100-sxm], tensor_parallel_sizes: [1, 2]}
        thresholds_tokens: [1024, 4096]                               # prompt tokens up to which a request is short
        ratios: [[1, 1], [2, 1], [1, 2]]                              # short : long replicas of a unit
"""

from __future__ import annotations

from typing import Any

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.rules import RULES, Ctx
from planner.sizing.question import LengthRouted
from planner.sizing.spec_disaggregated import check_unit_count, parse_ratios, parse_role
from planner.sizing.spec_fields import int_list, mapping, section
from sim.config import FleetRouterConfig, Scenario

LENGTH_ROUTED_KEYS = ("short", "long", "thresholds_tokens", "ratios")
DEFAULT_RATIOS = ((1, 1), (2, 1), (1, 2), (3, 1), (1, 3))
THRESHOLD_RULE = RULES[(FleetRouterConfig, "threshold_tokens")]


def parse_length_routed(raw: Any, scenario: Scenario, tp_rule, ctx: Ctx, engine_sweep) -> LengthRouted | None:
    """None when the section is absent. `engine_sweep`: as for search.disaggregated's roles."""
    if raw is None:
        return None
    where = "search.length_routed"
    d = mapping(raw, where, LENGTH_ROUTED_KEYS, ctx)
    roles = {
        role: parse_role(section(d, role), f"{where}.{role}", scenario, tp_rule, ctx, engine_sweep)
        for role in ("short", "long")
    }
    if "thresholds_tokens" not in d:
        raise ScenarioError(
            ctx.file, f"{where}.thresholds_tokens", NO_VALUE,
            "missing; give the prompt lengths (tokens) up to which a request goes to the short pool, e.g. [1024, 4096]",
        )  # fmt: skip
    thresholds = int_list(d["thresholds_tokens"], f"{where}.thresholds_tokens", THRESHOLD_RULE, ctx)
    longest = scenario.max_model_len
    for i, t in enumerate(thresholds):
        if t >= longest:
            raise ScenarioError(
                ctx.file, f"{where}.thresholds_tokens[{i}]", t,
                f"must be below max_model_len ({longest:,}): no prompt would be long, and the long pool idle",
            )  # fmt: skip
    ratios = parse_ratios(d.get("ratios"), f"{where}.ratios", ctx, ("short", "long"), DEFAULT_RATIOS)
    (sg, stp, se), (lg, ltp, le) = roles["short"], roles["long"]
    spec = LengthRouted(sg, stp, se, lg, ltp, le, thresholds, ratios)
    units = len(sg) * len(stp) * len(se) * len(lg) * len(ltp) * len(le) * len(thresholds) * len(ratios)
    check_unit_count(
        units, "length-routed units (GPUs x sizes x engine settings per pool x thresholds x ratios)", where, ctx
    )
    return spec
