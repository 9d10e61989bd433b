"""The sizing file's `search.money` section (rent or buy, prices over the catalog's, power, host memory) and the
check that every GPU a candidate or a unit may use has the prices its objective needs; read with the scenario's
message shape (file: key = value: what is allowed)."""

from __future__ import annotations

from typing import Any

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.rules import MAX_PURCHASE_USD, MAX_RENTAL_USD_PER_HOUR, Ctx, did_you_mean
from planner.sizing.question import Disaggregated, LengthRouted, Money
from planner.sizing.spec_fields import mapping, one_of, price_map, scalar
from sim.config import GpuSpec

OBJECTIVES = ("rental", "purchase", "both")
# Host memory prices: far above any market's (server DRAM is a few USD per GiB to buy), low enough to print.
MAX_HOST_USD_PER_GIB_HOUR = 100.0
MAX_HOST_USD_PER_GIB = 100_000.0
MONEY_KEYS = (
    "objective",
    "rental_usd_per_gpu_hour",
    "purchase_usd_per_gpu",
    "power_usd_per_kwh",
    "power_utilization",
    "amortization_months",
    "hours_per_month",
    "host_memory_usd_per_gib_hour",
    "host_memory_usd_per_gib",
)


def parse_money(raw: Any, ctx: Ctx) -> Money:
    m = mapping(raw, "search.money", MONEY_KEYS, ctx)
    w = "search.money"
    return Money(
        objective=scalar(
            m, "objective", str, "rental", w, ctx, lambda v: v in OBJECTIVES, one_of(OBJECTIVES), OBJECTIVES
        ),
        rental_usd_per_gpu_hour=price_map(
            m.get("rental_usd_per_gpu_hour"), f"{w}.rental_usd_per_gpu_hour", ctx, MAX_RENTAL_USD_PER_HOUR
        ),
        purchase_usd_per_gpu=price_map(
            m.get("purchase_usd_per_gpu"), f"{w}.purchase_usd_per_gpu", ctx, MAX_PURCHASE_USD
        ),
        # US average commercial electricity, 2025: ~$0.13-0.14/kWh (EIA Electric Power Monthly, table 5.6.A).
        power_usd_per_kwh=scalar(m, "power_usd_per_kwh", float, 0.14, w, ctx, lambda v: v >= 0, "must be >= 0"),
        # A serving GPU's average draw sits well below its board limit; 0.7 is an assumption, not a measurement.
        power_utilization=scalar(m, "power_utilization", float, 0.7, w, ctx, lambda v: 0 < v <= 1, "must be in (0, 1]"),
        # A month to 50 years: 1e-300 months spread the price over nothing ($inf a month).
        amortization_months=scalar(
            m, "amortization_months", float, 36.0, w, ctx, lambda v: 1 <= v <= 600, "must be in [1, 600] months"
        ),
        hours_per_month=scalar(m, "hours_per_month", float, 730.0, w, ctx, lambda v: 0 < v <= 744, "must be in (0, 744]"),
        host_memory_usd_per_gib_hour=scalar(
            m, "host_memory_usd_per_gib_hour", float, 0.0, w, ctx, lambda v: 0 <= v <= MAX_HOST_USD_PER_GIB_HOUR,
            f"must be in [0, {MAX_HOST_USD_PER_GIB_HOUR:g}] USD per GiB-hour",
        ),
        host_memory_usd_per_gib=scalar(
            m, "host_memory_usd_per_gib", float, 0.0, w, ctx, lambda v: 0 <= v <= MAX_HOST_USD_PER_GIB,
            f"must be in [0, {MAX_HOST_USD_PER_GIB:,.0f}] USD per GiB",
        ),
    )  # fmt: skip


def check_prices(
    gpus: tuple[GpuSpec, ...],
    given: bool,
    money: Money,
    ctx: Ctx,
    disaggregated: Disaggregated | None = None,
    length_routed: LengthRouted | None = None,
) -> None:
    """A GPU the user named must have the prices its objective needs (catalog or search.money); a unit's GPUs too
    (`search.disaggregated`, `search.length_routed`: named by the user or the scenario's)."""
    roles = [
        ("disaggregated", disaggregated, ("prefill", "decode")),
        ("length_routed", length_routed, ("short", "long")),
    ]
    roles = [(section_name, spec, role) for section_name, spec, names in roles if spec is not None for role in names]
    unit_gpus = [gpu for _, spec, role in roles for gpu in getattr(spec, f"{role}_gpus")]
    names = {gpu.name for gpu in (*gpus, *unit_gpus)}
    for key in ("rental_usd_per_gpu_hour", "purchase_usd_per_gpu"):
        for name in getattr(money, key):
            if name not in names:
                raise ScenarioError(
                    ctx.file, f"search.money.{key}.{name}", NO_VALUE,
                    f"is not a candidate GPU{did_you_mean(name, sorted(names))}; candidates: {', '.join(sorted(names))}",
                )  # fmt: skip
    named = [] if not given else [(f"search.candidates.gpus[{i}]", gpu) for i, gpu in enumerate(gpus)]
    for section_name, spec, role in roles:  # catalog GPUs without a price are pruned from the candidates, said so
        role_gpus = getattr(spec, f"{role}_gpus")
        named += [(f"search.{section_name}.{role}.gpus[{i}]", gpu) for i, gpu in enumerate(role_gpus)]
    for where, gpu in named:
        for need, key, catalog_value in _needs(money, gpu):
            if catalog_value is None and gpu.name not in getattr(money, key):
                raise ScenarioError(
                    ctx.file, where, gpu.name,
                    f"has no {need} price and objective {money.objective} needs one; set"
                    f" search.money.{key}: {{{gpu.name}: <USD>}} (or hardware.gpu fields"
                    f" {'rental_usd_per_hour' if need == 'rental' else 'purchase_usd'} in an inline GPU)",
                )  # fmt: skip
            if need == "purchase" and gpu.tdp_w is None and money.power_usd_per_kwh > 0:
                raise ScenarioError(
                    ctx.file, where, gpu.name,
                    "has no tdp_w, which the purchase objective needs for the power bill; give an inline GPU with"
                    " tdp_w, or set search.money.power_usd_per_kwh: 0",
                )  # fmt: skip


def _needs(money: Money, gpu: GpuSpec) -> list[tuple[str, str, float | None]]:
    needs = []
    if money.objective in ("rental", "both"):
        needs.append(("rental", "rental_usd_per_gpu_hour", gpu.rental_usd_per_hour))
    if money.objective in ("purchase", "both"):
        needs.append(("purchase", "purchase_usd_per_gpu", gpu.purchase_usd))
    return needs
