"""Transfers in flight on shared links (sim/kv_transfer.SharedLinks) on the SimPy clock: a disaggregated fleet's KV
pulls (sim/fleet.py) and a replica's loads from its host KV tier (sim/host_link.py)."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import simpy

from sim.kv_transfer import SharedLinks


class LinkClock:
    """Moves the transfers in flight on, calling done(key) for each once its bytes are through."""

    def __init__(self, env: simpy.Environment, done: Callable[[Hashable], None]) -> None:
        self.env, self.done = env, done
        self.links = SharedLinks()
        self.changed = env.event()
        env.process(self._run())

    def add(self, key: Hashable, solo_s: float, source: Hashable, destination: Hashable) -> None:
        """A transfer of solo_s seconds alone on its links starts now."""
        self.links.add(key, solo_s, source, destination, self.env.now)
        if not self.changed.triggered:
            self.changed.succeed()

    def _run(self):
        env = self.env
        while True:
            finish_s = self.links.next_finish_s()
            if finish_s is None:
                yield self.changed
            else:
                yield env.any_of([env.timeout(max(finish_s - env.now, 0.0)), self.changed])
            if self.changed.triggered:
                self.changed = env.event()
            for key in self.links.pop_finished(env.now):
                self.done(key)
