"""Where speculative decoding helps and where it hurts: `python -m planner.sizing.speculation_curve [SCENARIO]`
simulates the scenario at rising numbers of users (a closed loop, no think time), without speculation and with its
method at k = 1, 3 and 5, and prints mean TPOT and output throughput, marking where each k first gives a longer
TPOT or less throughput than no speculation (the crossovers). The acceptance is the scenario's (or the published
default)."""

from __future__ import annotations

import argparse
import dataclasses

from planner.scenario.load import load_scenario
from sim.config import ArrivalConfig
from sim.driver import simulate
from sim.metrics import summarize

DEFAULT = "scenarios/h100_llama31_8b_eagle3.yaml"
USERS = (1, 4, 16, 64, 256, 1024)
KS = (1, 3, 5)


def _run(scenario, users: int, k: int | None) -> tuple[float, float]:
    spec = None if k is None else dataclasses.replace(scenario.engine.speculative, num_speculative_tokens=k)
    workload = dataclasses.replace(
        scenario.workload, num_requests=max(64, 2 * users), arrival=ArrivalConfig(process="closed", concurrency=users)
    )
    s = dataclasses.replace(scenario, engine=dataclasses.replace(scenario.engine, speculative=spec), workload=workload)
    summary = summarize(simulate(s, record_steps=False).recorder, s.slo)
    return summary["mean_tpot_ms"], summary["output_throughput"]


def curve(path: str) -> list[str]:
    scenario = load_scenario(path)
    if scenario.engine.speculative is None:
        raise SystemExit(f"{path}: no engine.speculative to vary")
    method = scenario.engine.speculative.method
    header = ["users", "off: TPOT ms, tok/s"] + [f"{method} k={k}: TPOT ms, tok/s" for k in KS]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    crossed: dict[tuple[str, int], int] = {}  # (what, k) -> the first load where it is worse than off
    for users in USERS:
        off_tpot, off_rate = _run(scenario, users, None)
        cells = [str(users), f"{off_tpot:.2f}, {off_rate:,.0f}"]
        for k in KS:
            tpot, rate = _run(scenario, users, k)
            marks = [what for what, worse in (("TPOT", tpot > off_tpot), ("throughput", rate < off_rate)) if worse]
            for what in marks:
                crossed.setdefault((what, k), users)
            cells.append(f"{tpot:.2f}, {rate:,.0f}" + (f" ({' and '.join(marks)} worse)" if marks else ""))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for k in KS:
        said = [f"{what} from {crossed[what, k]} users" for what in ("TPOT", "throughput") if (what, k) in crossed]
        lines.append(f"k={k} is worse than no speculation in " + (", ".join(said) if said else "nothing up to"
                     f" {USERS[-1]} users") + ".")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m planner.sizing.speculation_curve", description=__doc__)
    parser.add_argument("scenario", nargs="?", default=DEFAULT)
    print("\n".join(curve(parser.parse_args(argv).scenario)))


if __name__ == "__main__":
    main()
