"""Where speculative decoding helps and where it hurts: `python -m planner.sizing.speculation_curve [SCENARIO]`
simulates the scenario at rising numbers of users (a closed loop, no think time), without speculation and with its
method at k = 1, 3 and 5, and prints mean TPOT and output throughput, marking where each k first gives a longer
TPOT or less throughput than no speculation (the crossovers). The acceptance is the scenario's (or the published
default). `planner size` draws the same curves for the speculative configs its search sweeps
(planner/sizing/report/speculation.py)."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

from planner.scenario.load import load_scenario
from sim.config import ArrivalConfig, Scenario
from sim.cost_coefficients import CostCoefficients
from sim.driver import simulate
from sim.metrics import summarize

DEFAULT = "scenarios/h100_llama31_8b_eagle3.yaml"
USERS = (1, 4, 16, 64, 256, 1024)
KS = (1, 3, 5)
WORSE = ("TPOT", "throughput")  # what a crossover is of: a longer mean TPOT, a lower output throughput


@dataclass(frozen=True)
class Curve:
    """One engine's mean TPOT (ms) and output throughput (tokens/s) at each load of `users`."""

    label: str
    users: tuple[int, ...]
    tpot_ms: tuple[float, ...]
    output_tps: tuple[float, ...]

    def worse_than(self, off: Curve) -> dict[str, list[bool]]:
        """Per load, whether this engine's TPOT is longer and its throughput lower than `off`'s."""
        return {
            "TPOT": [a > b for a, b in zip(self.tpot_ms, off.tpot_ms)],
            "throughput": [a < b for a, b in zip(self.output_tps, off.output_tps)],
        }

    def crossovers(self, off: Curve) -> dict[str, int]:
        """What -> the first load where this engine is worse than `off` at it (absent: nowhere in the range)."""
        return {what: self.users[flags.index(True)] for what, flags in self.worse_than(off).items() if any(flags)}


def load_point(scenario: Scenario, users: int, coefficients: CostCoefficients | None = None) -> tuple[float, float]:
    """(mean TPOT ms, output tokens/s) of the scenario's engine under a closed loop of `users`."""
    workload = dataclasses.replace(
        scenario.workload, num_requests=max(64, 2 * users), arrival=ArrivalConfig(process="closed", concurrency=users)
    )
    s = dataclasses.replace(scenario, workload=workload)
    summary = summarize(simulate(s, coefficients, record_steps=False).recorder, s.slo)
    return summary["mean_tpot_ms"], summary["output_throughput"]


def curve(label: str, scenario: Scenario, coefficients=None, users: tuple[int, ...] = USERS) -> Curve:
    points = [load_point(scenario, n, coefficients) for n in users]
    return Curve(label, tuple(users), tuple(p[0] for p in points), tuple(p[1] for p in points))


def table_lines(curves: list[Curve]) -> list[str]:
    """A markdown table of every curve's figures per load, the first curve (speculation off) the reference, each
    load where another is worse marked, then a sentence per curve saying where it first is."""
    off, users = curves[0], curves[0].users
    header = ["users", f"{off.label}: TPOT ms, tok/s"] + [f"{c.label}: TPOT ms, tok/s" for c in curves[1:]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    worse = [c.worse_than(off) for c in curves[1:]]
    for i, n in enumerate(users):
        cells = [str(n), f"{off.tpot_ms[i]:.2f}, {off.output_tps[i]:,.0f}"]
        for c, flags in zip(curves[1:], worse):
            marks = [what for what in WORSE if flags[what][i]]
            cells.append(
                f"{c.tpot_ms[i]:.2f}, {c.output_tps[i]:,.0f}" + (f" ({' and '.join(marks)} worse)" if marks else "")
            )
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for c in curves[1:]:
        crossed = c.crossovers(off)
        said = [f"{what} from {crossed[what]} users" for what in WORSE if what in crossed]
        lines.append(f"{c.label} is worse than no speculation in " + (", ".join(said) if said else "nothing up to"
                     f" {users[-1]} users") + ".")  # fmt: skip
    return lines


def k_curves(path: str) -> list[str]:
    scenario = load_scenario(path)
    spec = scenario.engine.speculative
    if spec is None:
        raise SystemExit(f"{path}: no engine.speculative to vary")

    def with_k(k: int | None) -> Scenario:
        changed = None if k is None else dataclasses.replace(spec, num_speculative_tokens=k)
        return dataclasses.replace(scenario, engine=dataclasses.replace(scenario.engine, speculative=changed))

    curves = [curve("off", with_k(None))] + [curve(f"{spec.method} k={k}", with_k(k)) for k in KS]
    return table_lines(curves)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m planner.sizing.speculation_curve", description=__doc__)
    parser.add_argument("scenario", nargs="?", default=DEFAULT)
    print("\n".join(k_curves(parser.parse_args(argv).scenario)))


if __name__ == "__main__":
    main()
