"""`python -m gpu_engine.gpu_check`: without a GPU it says so and exits 2; its target table judges the
benchmarks' JSON figures (the same keys kernels.bench and gpu_engine.bench write, checked by their tests)."""

import pytest

torch = pytest.importorskip("torch")

pytest.importorskip("triton")
from gpu_engine.gpu_check import main, targets

KERNELS = {
    "cases": [
        {"case": "decode attention", "impl": "triton", "copy_share": 0.85},
        {"case": "decode attention", "impl": "torch ref", "copy_share": 0.1},
        {"case": "store_kv", "impl": "triton", "copy_share": 0.65},
    ]
}
ENGINE = {"decode": {"ratio": 1.1, "step_ms": 5.0, "host_ms": 1.2}, "throughput": {"ratio": 2.5}}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_without_a_gpu_it_says_so_and_exits_2(capsys):
    assert main([]) == 2
    assert "no GPU" in capsys.readouterr().err


def test_every_target_beside_its_figure():
    rows = {name: (value, goal, verdict) for name, value, goal, verdict in targets(KERNELS, ENGINE)}
    assert rows["batch-1 decode step / weights-read floor"] == ("1.10", "<= 1.15x", "met")
    assert rows["decode attention / copy bandwidth"] == ("85", ">= 80%", "met")
    assert rows["store_kv / copy bandwidth"] == ("65", ">= 70%", "MISSED")
    assert rows["engine / static generate throughput"] == ("2.50", ">= 3x", "MISSED")
    assert rows["host ms per decode step (of the step's ms)"][::2] == ("1.200", "met")


def test_a_stage_that_failed_shows_as_not_measured():
    rows = targets(None, None)
    assert len(rows) == 5 and all(value == "not measured" and verdict == "-" for _, value, _, verdict in rows)
