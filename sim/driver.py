"""The SimPy driver: `simulate` runs a scenario of one pool (sim/simulation.py), or of a data-parallel group
(sim/data_parallel.py). Fleets run through sim/fleet.py's `simulate_fleet`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.config import Scenario
from sim.cost_coefficients import CostCoefficients
from sim.data_parallel import DataParallelSimulation
from sim.engine_facts import EngineFacts
from sim.simulation import SimResult, Simulation


def simulate(
    scenario: Scenario,
    coefficients: CostCoefficients | None = None,
    record_steps: bool = True,
    progress: Callable[[int, int], None] | None = None,
    fast_forward: bool = True,
    steps_sink: Callable[[dict[str, np.ndarray]], None] | None = None,
    facts: EngineFacts | None = None,
) -> SimResult:
    """Run a scenario. fast_forward=False is the reference the fast paths are tested against: every decode
    step its own event, every row through allocate_slots, every full block registered in the prefix cache
    at allocation (for tests). steps_sink takes the step rows in chunks as the run goes (see
    sim.metrics.Recorder). facts: as Simulation's."""
    kind = simulation_class(scenario)
    return kind(scenario, coefficients, record_steps, progress, fast_forward, steps_sink, facts).run()


def simulation_class(scenario: Scenario) -> type[Simulation]:
    """The one-pool simulation, or the data-parallel group's (its ranks behind vLLM's DP balancer)."""
    return DataParallelSimulation if scenario.hardware.data_parallel_size > 1 else Simulation
