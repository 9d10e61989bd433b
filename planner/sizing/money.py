"""Replicas for the demand, and what they cost: rented per hour, or bought (capex over the amortisation
period plus the power bill: TDP x utilisation x $/kWh). Prices come from the GPU catalog (estimates, each
with its source in planner/catalog/gpus.yaml) unless the sizing file overrides them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from planner.sizing.question import Demand, Money
from sim.config import GpuSpec


@dataclass(frozen=True)
class Prices:
    rental_usd_per_gpu_hour: float | None
    rental_source: str
    purchase_usd_per_gpu: float | None
    purchase_source: str
    tdp_w: float | None


@dataclass(frozen=True)
class Costs:
    num_gpus: int
    host_memory_gib: float  # pinned for KV tiers, every GPU's (engine.kv_offload.size_gib x GPUs)
    rental_usd_per_hour: float | None
    rental_usd_per_month: float | None
    purchase_capex_usd: float | None
    power_usd_per_month: float | None
    purchase_usd_per_month: float | None  # capex / amortisation months + power
    rental_usd_per_million_output_tokens: float | None
    purchase_usd_per_million_output_tokens: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def prices(gpu: GpuSpec, money: Money) -> Prices:
    rent, buy = money.rental_usd_per_gpu_hour, money.purchase_usd_per_gpu
    return Prices(
        rent.get(gpu.name, gpu.rental_usd_per_hour),
        "search.money.rental_usd_per_gpu_hour" if gpu.name in rent else "catalog estimate (planner/catalog/gpus.yaml)",
        buy.get(gpu.name, gpu.purchase_usd),
        "search.money.purchase_usd_per_gpu" if gpu.name in buy else "catalog estimate (planner/catalog/gpus.yaml)",
        gpu.tdp_w,
    )


def replicas_needed(demand: Demand, capacity_per_replica: float, allowed: tuple[int, ...] | None) -> int | None:
    """Replicas for demand x headroom; None when the capacity is zero or no allowed count is enough."""
    if capacity_per_replica <= 0:
        return None
    needed = max(1, math.ceil(demand.value * demand.headroom / capacity_per_replica - 1e-9))
    if allowed is None:
        return needed
    enough = [r for r in sorted(allowed) if r >= needed]
    return enough[0] if enough else None


def costs(p: Prices, money: Money, num_gpus: int, output_tokens_per_s: float, host_memory_gib: float = 0.0) -> Costs:
    """`host_memory_gib`: the deployment's host memory for KV tiers, priced at search.money's host memory rates."""
    hours = money.hours_per_month
    rent_h = None
    if p.rental_usd_per_gpu_hour is not None:
        rent_h = p.rental_usd_per_gpu_hour * num_gpus + money.host_memory_usd_per_gib_hour * host_memory_gib
    capex = power = buy_month = None
    if p.purchase_usd_per_gpu is not None:
        capex = p.purchase_usd_per_gpu * num_gpus + money.host_memory_usd_per_gib * host_memory_gib
        watts = (p.tdp_w or 0.0) * money.power_utilization * num_gpus
        power = watts / 1000 * hours * money.power_usd_per_kwh
        buy_month = capex / money.amortization_months + power
    tokens_per_month = output_tokens_per_s * 3600 * hours

    def per_million(usd_per_month):
        return None if usd_per_month is None or tokens_per_month <= 0 else usd_per_month / tokens_per_month * 1e6

    rent_month = None if rent_h is None else rent_h * hours
    return Costs(
        num_gpus,
        host_memory_gib,
        rent_h,
        rent_month,
        capex,
        power,
        buy_month,
        per_million(rent_month),
        per_million(buy_month),
    )


def objective_usd_per_month(c: Costs, objective: str) -> float | None:
    """What candidates are ranked by: rental, or purchase (amortised + power); `both` ranks by rental and
    the report names the cheapest to buy beside it."""
    return c.purchase_usd_per_month if objective == "purchase" else c.rental_usd_per_month


def objective_usd_per_month_bound(p: Prices, money: Money, num_gpus: int, host_memory_gib: float = 0.0) -> float | None:
    """The objective's cost for `num_gpus` (and their KV tiers' host memory), before knowing the throughput (for
    pruning)."""
    return objective_usd_per_month(costs(p, money, num_gpus, 0.0, host_memory_gib), money.objective)
