"""A disk tier behind the host KV tier (engine.kv_offload.disk_gib, LMCache's local disk backend): written with every
block the host tier stores, looked up past the host tier's hits, its blocks loaded at the slower of the disk's read
rate and the host link; what it reports per tier; the values it refuses (exit 2), and the live engine's files."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ROOT

from planner.cli import main
from planner.outputs.prefix_reuse import lru_hit_rates
from planner.scenario.load import load_scenario
from sim.config import KvOffloadConfig
from sim.disk_tier import DiskTier, disk_load_s
from sim.driver import simulate
from sim.host_tier import HostTier
from sim.metrics import summarize

CONV = ROOT / "scenarios" / "h100_llama31_8b_mooncake_conv.yaml"
DISK_SCENARIO = ROOT / "scenarios" / "cpu_tiny_disk.yaml"
# the conversation trace's first 600 rows on a 100 GiB host tier: it evicts, and a 400 GiB disk keeps what it lost
HOST = "{size_gib: 100, host_link_gb_s: 50"
DISK = HOST + ", disk_gib: 400, disk_read_gb_s: 5, disk_write_gb_s: 2}"


def _summary(overrides):
    s = load_scenario(CONV, ["workload.num_requests=600", *overrides])
    result = simulate(s, record_steps=False)
    return s, summarize(result.recorder, s.slo), result.memory.block_bytes // s.engine.block_size


def test_the_disk_is_written_with_every_store_and_looked_up_past_the_host():
    config = KvOffloadConfig(size_gib=1.0, host_link_gb_s=10.0, disk_gib=2.0, disk_read_gb_s=1.0, disk_write_gb_s=1.0)
    host = HostTier(2, 100, config)
    host.disk = DiskTier(4, 100, config)
    host.store(["a", "b", "c"], [1, 2, 3])  # the host keeps b, c; the disk all three
    assert (host.num_evicted, host.disk.num_stored) == (1, 3)
    host.disk.advance(1.0)  # their writes (100 bytes each at 1 GB/s) have ended
    assert host.lookup(["a", "b", "c"]) == 3 and host.last_disk_hits == 3  # a is not on the host: the run is the disk's
    assert host.lookup(["b", "c", "a"]) == 3 and host.last_disk_hits == 1  # the host's two, then the disk's one
    assert host.lookup(["b", "x", "a"]) == 1 and host.last_disk_hits == 0  # the leading run only


def test_a_block_is_found_on_the_disk_once_its_write_has_ended():
    """The writes queue at disk_write_gb_s, one after another (LMCache's asynchronous put(), its key registered once
    its file is written): a lookup finds the leading run of blocks written by the executor's clock."""
    slow = KvOffloadConfig(size_gib=1.0, host_link_gb_s=10.0, disk_gib=2.0, disk_read_gb_s=1.0, disk_write_gb_s=1e-7)
    disk = DiskTier(8, 100, slow)  # 100 bytes at 100 bytes/s: one block's write takes 1 s
    disk.store(["a", "b", "c"], [1, 2, 3])  # queued at 0 s: written at 1, 2 and 3 s
    assert disk.lookup(["a", "b", "c"]) == 0 and disk.num_unwritten == 1
    disk.advance(2.5)
    assert disk.lookup(["a", "b", "c"]) == 2 and disk.num_unwritten == 2  # c is still being written
    disk.store(["a", "d"], [1, 4])  # a is held already (touched, not written again); d waits behind c: 4 s
    assert disk.max_backlog_s == pytest.approx(3.0)  # c's wait from 0 s, longer than d's 1.5 s
    disk.advance(3.5)
    assert disk.lookup(["a", "b", "c", "d"]) == 3
    disk.advance(4.0)
    assert disk.lookup(["a", "b", "c", "d"]) == 4 and disk.num_unwritten == 3
    disk.advance(10.0)  # an idle disk: the next write starts when it is stored
    disk.store(["e"], [5])
    disk.advance(10.9)
    assert disk.lookup(["e"]) == 0
    disk.advance(11.0)
    assert disk.lookup(["e"]) == 1


def test_a_disk_slower_than_the_blocks_come_finds_less():
    """The same 600 turns with the disk written at 2 GB/s and at 0.05 GB/s: the slow disk's queue runs far behind the
    stores, lookups stop at blocks not written yet, and the disk finds a fraction of what the fast one does."""
    _, fast, _ = _summary([f"engine.kv_offload={DISK}"])
    _, slow, _ = _summary([f"engine.kv_offload={DISK.replace('disk_write_gb_s: 2', 'disk_write_gb_s: 0.05')}"])
    fast_disk, slow_disk = fast["kv_offload"]["disk"], slow["kv_offload"]["disk"]
    assert slow_disk["max_write_backlog_s"] > 40 * fast_disk["max_write_backlog_s"]
    assert slow_disk["num_unwritten_lookups"] > fast_disk["num_unwritten_lookups"]
    assert slow["prefix_cache"]["disk_hit_rate"] < fast["prefix_cache"]["disk_hit_rate"] / 2
    assert slow["mean_ttft_ms"] > fast["mean_ttft_ms"]


def test_a_load_moves_disk_blocks_at_the_slower_rate():
    config = KvOffloadConfig(size_gib=1.0, host_link_gb_s=10.0, disk_gib=2.0, disk_read_gb_s=2.0, disk_write_gb_s=1.0)
    assert disk_load_s(3, 2, 10**9, config) == pytest.approx(3 / 10 + 2 / 2)
    fast_disk = KvOffloadConfig(1.0, 10.0, None, 2.0, 40.0, 1.0)
    assert disk_load_s(3, 2, 10**9, fast_disk) == pytest.approx(5 / 10)  # the host link is then the slower


def test_gpu_host_and_disk_together_find_what_an_lru_of_the_disks_size_finds_at_light_load():
    s, with_disk, bytes_per_token = _summary([f"engine.kv_offload={DISK}"])
    prefix, disk = with_disk["prefix_cache"], with_disk["kv_offload"]["disk"]
    assert prefix["disk_hit_rate"] > 0.01  # the host tier evicted, the disk kept
    # the disk holds every block stored (an LRU behind the host): all tiers together are an LRU of its size
    (lru,) = lru_hit_rates(s, [disk["num_blocks"]])
    assert prefix["hit_rate"] + prefix["host_hit_rate"] + prefix["disk_hit_rate"] == pytest.approx(lru, abs=0.01)
    # bytes per tier: each tier's hits, read from it
    assert disk["read_bytes"] == prefix["disk_hit_tokens"] * bytes_per_token
    assert with_disk["kv_offload"]["loaded_bytes"] == prefix["host_hit_tokens"] * bytes_per_token
    assert disk["write_s"] == pytest.approx(disk["written_bytes"] / 2e9)
    # the host tier alone finds less, and a disk read at the host link's rate loads faster
    host_only = _summary([f"engine.kv_offload={HOST}}}"])[1]["prefix_cache"]
    assert prefix["host_hit_tokens"] + prefix["disk_hit_tokens"] > 2 * host_only["host_hit_tokens"]
    fast = _summary([f"engine.kv_offload={DISK.replace('disk_read_gb_s: 5', 'disk_read_gb_s: 50')}"])[1]
    assert fast["kv_offload"]["load_s"] < with_disk["kv_offload"]["load_s"]


@pytest.mark.parametrize(
    ("kv_offload", "words"),
    [
        (
            HOST + ", disk_gib: 400, disk_write_gb_s: 2}",
            "engine.kv_offload.disk_read_gb_s: is required with disk_gib",
        ),
        (
            HOST + ", disk_write_gb_s: 2}",
            "engine.kv_offload.disk_write_gb_s = 2.0: is a disk tier's: give disk_gib",
        ),
        (
            HOST + ", disk_gib: 50, disk_read_gb_s: 5, disk_write_gb_s: 2}",
            "engine.kv_offload.disk_gib = 50.0: must be larger than size_gib (100)",
        ),
        (DISK.replace("disk_read_gb_s: 5", "disk_read_gb_s: 0"), "engine.kv_offload.disk_read_gb_s = 0.0: must be in"),
    ],
)
def test_bad_disk_tiers_are_refused(capsys, kv_offload, words):
    assert (
        main(["simulate", str(CONV), "--set", "workload.num_requests=4", "--set", f"engine.kv_offload={kv_offload}"])
        == 2
    )
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_cpu_scenario_loads_from_both_tiers():
    # what the disk-tier parity case (tests/test_executor_parity.py) runs on both executors
    s = load_scenario(DISK_SCENARIO)
    prefix = summarize(simulate(s, record_steps=False).recorder, s.slo)["prefix_cache"]
    assert prefix["host_hit_tokens"] > 0 and prefix["disk_hit_tokens"] > 0


def test_the_live_engine_writes_a_block_to_disk_and_reads_it_back_exactly():
    torch = pytest.importorskip("torch")
    from helpers.engine import tier_copies

    from sim.kv_manager import KVCacheManager
    from sim.request import Request

    config = KvOffloadConfig(size_gib=1.0, host_link_gb_s=10.0, disk_gib=2.0, disk_read_gb_s=1.0, disk_write_gb_s=1.0)
    kv = KVCacheManager(8, 16, enable_caching=True)
    kv.host = HostTier(1, 1, config)  # one block on the host: the first of two is evicted there, kept on disk
    kv.host.disk = DiskTier(4, 1, config)
    copies, caches, added = tier_copies(kv)
    first = Request(0, 0.0, 40, 4, prompt_token_ids=list(range(40)))
    assert kv.allocate_slots(first, 40)  # its two full blocks are registered, and stored in the tiers
    copies._copy_out()  # after the step that computed them
    assert len(copies.blocks) == 1 and len(copies.disk.files) == 2
    computed = [(k[first.block_ids[:2]].clone(), v[first.block_ids[:2]].clone()) for k, v in caches]
    for k, v in caches:  # the GPU's copies are gone
        k.zero_()
        v.zero_()
    again = Request(1, 0.0, 40, 4, prompt_token_ids=list(range(40)))
    again.block_ids = [5, 6]  # the blocks the scheduler gave its load: the first from the disk, the second the host's
    copies.loads.append((again, 2))
    copies._load(lambda: 0.0)
    for (k, v), (k_then, v_then) in zip(caches, computed, strict=True):
        assert torch.equal(k[[5, 6]], k_then) and torch.equal(v[[5, 6]], v_then)
    assert added == [again] and copies.loads == []
    folder = Path(copies.disk.folder.name)
    kv.host.disk.store(["x", "y", "z", "w"], [1, 2, 3, 4])  # four new blocks: the disk evicts the first two
    copies._copy_out()
    copies.close()
    assert len(copies.disk.files) == 4 and not folder.exists()  # written, and removed with the run


def test_lmcaches_examples_are_simulated_as_a_prompt_computed_then_found_on_the_gpu():
    from planner.fidelity import kv_offload

    cold_s, warm_s, label = kv_offload.simulated_ttfts_s()
    assert cold_s > 20 * warm_s and "transferred" in label  # no L4 profile: its coefficients come from others
    rows = [r for r in kv_offload.rows() if r[4] != "not simulated"]
    assert [r[2] for r in rows] == ["cold TTFT", "warm TTFT"] * 2
    listed = [m for m in kv_offload.MEASUREMENTS if m.simulated]
    for row, measured in zip(rows, [t for m in listed for t in (m.cold_ttft_s, m.warm_ttft_s)], strict=True):
        ours = cold_s if row[2] == "cold TTFT" else warm_s
        assert row[5].startswith(f"{100 * (ours / measured - 1):.1f}%")
