"""The live prefill/decode pair (gpu_engine/pd_pair.py) against the simulated fleet on the same scenario: the same
pulls (count, tokens, bytes); and the copied KV is the prefill engine's: the decode engine's first token, sampled
over it, is the one the prefill engine sampled (greedy). The two sides' steps, step by step: the pd-pair case of
tests/test_executor_parity.py."""

from __future__ import annotations

from pathlib import Path

import yaml

import gpu_engine.pd_pair
from gpu_engine.pd_pair import run_pd_pair
from planner.scenario.load import load_scenario
from sim.fleet import PoolRecorder, simulate_fleet

ROOT = Path(__file__).resolve().parent.parent


def serial_pair(tmp_path: Path):
    """The shipped CPU pair, one user at a time (each reply before the next request): the steps' composition
    does not depend on how fast either side runs."""
    data = yaml.safe_load((ROOT / "scenarios" / "cpu_tiny_pd.yaml").read_text())
    data["workload"] |= {"num_requests": 5, "arrival": {"process": "closed", "concurrency": 1}}
    data["workload"]["output_tokens"] = {"dist": "uniform", "low": 2, "high": 6}
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_scenario(str(path), [])


def finished_by_pool(monkeypatch) -> dict[int, list]:
    """Every finished request's token ids, by the pool (the recorder) that finished it."""
    seen: dict[int, list] = {}
    original = PoolRecorder.finished

    def finished(self, request):
        seen.setdefault(id(self), []).append((request.request_id, list(request.output_token_ids)))
        original(self, request)

    monkeypatch.setattr(PoolRecorder, "finished", finished)
    return seen


def test_live_pair_pulls_match_the_simulation(tmp_path, monkeypatch):
    s = serial_pair(tmp_path)
    seen = finished_by_pool(monkeypatch)
    live = run_pd_pair(s)
    simulated = simulate_fleet(s)
    for log in (live.transfers, simulated.transfers):
        assert len(log.start_s) == 5
    assert live.transfers.num_tokens == simulated.transfers.num_tokens
    assert live.transfers.num_bytes == simulated.transfers.num_bytes
    by_prefill, by_decode = first_tokens(seen, live)
    assert by_prefill == by_decode


def first_tokens(seen: dict, live) -> tuple[list[int], list[int]]:
    """Each request's token sampled by the prefill engine, and its first one sampled by the decode engine."""
    prefill, decode = (seen[id(pool.recorder)] for pool in live.pools)
    firsts = {request_id: tokens[0] for request_id, tokens in decode}
    return [tokens[0] for _, tokens in prefill], [firsts[request_id] for request_id, _ in prefill]


def test_without_the_copy_the_decode_engine_samples_otherwise(tmp_path, monkeypatch):
    # The token check above can fail: a pull that copies nothing leaves the decode engine other KV.
    def no_copy(prefilled, request, num_tokens, num_bytes, source, destination, clock, log):
        log.add(clock(), clock(), num_tokens, num_bytes)

    s = serial_pair(tmp_path)
    seen = finished_by_pool(monkeypatch)
    monkeypatch.setattr(gpu_engine.pd_pair, "_pull", no_copy)
    by_prefill, by_decode = first_tokens(seen, run_pd_pair(s))
    assert by_prefill != by_decode
