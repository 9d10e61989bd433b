"""Expert parallel (`hardware.expert_parallel`, vLLM's --enable-expert-parallel): routed experts placed whole
on the tensor-parallel ranks. Memory per GPU, the cost model's expert reads, the scenario checks, the serve line.
"""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from planner.catalog import load_model_catalog
from planner.errors import ScenarioError
from planner.scenario.load import load_scenario
from planner.sizing.serve import vllm_serve_command
from sim.cost_model import CostModel, expected_experts_touched, expected_local_experts_touched
from sim.engine_facts import EngineFacts
from sim.memory import forward_peak_bytes, memory_breakdown
from sim.memory_fit import tensor_parallel_that_fits
from sim.weights import absorbed_mla_copy_bytes, replicated_weights

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
QWEN3_MOE = SCENARIOS / "h100_qwen3_30b_a3b.yaml"
DEEPSEEK_V3 = SCENARIOS / "h200x8_deepseek_v3_tp8.yaml"
MODELS = load_model_catalog()


def _load(path: Path, tp: int, ep: bool, *more: str):
    return load_scenario(
        path, (f"hardware.tensor_parallel_size={tp}", f"hardware.expert_parallel={str(ep).lower()}", *more)
    )


def _with_experts(s, num_experts: int):
    """The same scenario with a model of another expert count (the layers' shapes unchanged)."""
    return dataclasses.replace(s, model=dataclasses.replace(s.model, num_experts=num_experts))


def _workspace(m, tokens: int, width: int) -> int:
    """fused_experts' cache13 and cache2 for `tokens` tokens and experts `width` wide, bf16."""
    return tokens * m.num_experts_per_tok * (max(2 * width, m.hidden_size) + width) * 2


def _vllm_local_experts(num_experts: int, ep_size: int) -> list[int]:
    """Every rank's count as vLLM's `determine_expert_map` computes it, rank by rank."""
    base, remainder = divmod(num_experts, ep_size)
    return [base + 1 if rank < remainder else base for rank in range(ep_size)]


@pytest.mark.parametrize(("num_experts", "tp"), [(128, 4), (60, 8), (8, 16), (256, 8), (10, 4)])
def test_the_largest_rank_holds_what_vllms_expert_map_gives_it(num_experts, tp):
    counts = _vllm_local_experts(num_experts, tp)
    assert sum(counts) == num_experts
    s = _with_experts(_load(QWEN3_MOE, 4, True), num_experts)
    s = dataclasses.replace(s, hardware=dataclasses.replace(s.hardware, tensor_parallel_size=tp))
    assert EngineFacts.of(s).max_local_experts == max(counts)


def test_qwen3_30b_a3b_memory_per_gpu_with_and_without_expert_parallel():
    for tp in (2, 4):
        off, on = _load(QWEN3_MOE, tp, False), _load(QWEN3_MOE, tp, True)
        assert EngineFacts.of(off).expert_parallel_size == 1 and EngineFacts.of(on).expert_parallel_size == tp
        m = on.model
        dense, experts = m.weight_bytes(2)
        # 128 experts split evenly: 128/tp whole experts per GPU weigh what a 1/tp slice of all 128 does; the
        # routers (48 x 2048 x 128 in bf16) are whole on every rank
        _, routers = replicated_weights(m, 2)
        assert routers == 48 * 2048 * 128 * 2
        assert EngineFacts.of(on).weights_bytes == pytest.approx((dense - routers + experts) / tp + routers, abs=1)
        assert EngineFacts.of(on).weights_bytes == pytest.approx(EngineFacts.of(off).weights_bytes, abs=1)
        # the fused-MoE workspaces are sized for the whole expert width, not width / tp: a larger peak
        tokens = on.engine.max_num_batched_tokens

        grow = _workspace(m, tokens, m.moe_intermediate_size) - _workspace(m, tokens, m.moe_intermediate_size // tp)
        assert grow > 0
        assert forward_peak_bytes(EngineFacts.of(on), tokens) - forward_peak_bytes(EngineFacts.of(off), tokens) == grow
        assert (
            memory_breakdown(EngineFacts.of(on)).num_gpu_blocks < memory_breakdown(EngineFacts.of(off)).num_gpu_blocks
        )


def test_deepseek_v3_on_8_h200_with_and_without_expert_parallel():
    off, on = _load(DEEPSEEK_V3, 8, False), _load(DEEPSEEK_V3, 8, True)
    dense, experts = on.model.weight_bytes(2)
    assert on.model.num_experts == 256 and EngineFacts.of(on).max_local_experts == 32
    _, replicated = replicated_weights(on.model, 2)  # MLA's down-projections and the routers, whole on each rank
    dense_per_rank = (dense - replicated) / 8 + replicated + absorbed_mla_copy_bytes(on.model) / 8
    assert EngineFacts.of(on).weights_bytes == pytest.approx(dense_per_rank + experts * 32 / 256, abs=1)
    assert EngineFacts.of(on).weights_bytes == pytest.approx(EngineFacts.of(off).weights_bytes, abs=1)
    # MLA's latent is replicated on every rank either way; only the MoE workspace differs
    a, b = memory_breakdown(EngineFacts.of(off)), memory_breakdown(EngineFacts.of(on))
    assert a.kv_bytes_per_token == b.kv_bytes_per_token
    assert b.activation_mlp_bytes > a.activation_mlp_bytes
    assert b.num_gpu_blocks < a.num_gpu_blocks


def test_uneven_expert_counts_cost_the_largest_rank_its_whole_experts():
    # Mixtral's 8 experts on 16 GPUs: ranks 0-7 hold one whole expert, ranks 8-15 none; without expert
    # parallel every GPU holds 1/16 of each. The busiest rank holds twice the expert bytes.
    off = load_scenario(QWEN3_MOE, ("model=mixtral-8x7b", "hardware.gpu=h200", "hardware.tensor_parallel_size=16"))
    on = load_scenario(
        QWEN3_MOE,
        (
            "model=mixtral-8x7b",
            "hardware.gpu=h200",
            "hardware.tensor_parallel_size=16",
            "hardware.expert_parallel=true",
        ),
    )
    dense, experts = on.model.weight_bytes(2)
    _, routers = replicated_weights(on.model, 2)  # whole on every rank
    assert EngineFacts.of(off).weights_bytes == pytest.approx((dense - routers + experts) / 16 + routers, abs=1)
    assert EngineFacts.of(on).weights_bytes == pytest.approx((dense - routers) / 16 + routers + experts / 8, abs=1)
    # the same in the cost model: each step's expert reads and flops on the busiest rank
    a, b = CostModel(EngineFacts.of(off)), CostModel(EngineFacts.of(on))
    for n in (1, 8, 256):
        assert b.linear_step_bytes(n) - b.linear_bytes == pytest.approx(2 * (a.linear_step_bytes(n) - a.linear_bytes))
    m = on.model
    routed = 2 * m.num_moe_layers * m.num_experts_per_tok * m.expert_weights
    assert b.linear_flops_per_token - a.linear_flops_per_token == pytest.approx(routed * (1 / 8 - 1 / 16))


def test_expert_parallel_cost_curve_from_active_to_total():
    # Qwen3-30B-A3B on 4 GPUs with expert parallel: each holds 32 whole experts. A decode step's expected
    # reads go from the dense part plus k x 32/128 experts (batch 1) to nearly all 32 (batch 256), the same
    # expected bytes as the tensor-sharded layout when the count divides evenly.
    off, on = (
        CostModel(EngineFacts.of(_load(QWEN3_MOE, 4, False))),
        CostModel(EngineFacts.of(_load(QWEN3_MOE, 4, True))),
    )
    m = _load(QWEN3_MOE, 4, True).model
    whole_expert = m.expert_weights * m.num_moe_layers * 2  # one expert index over every MoE layer, bf16
    assert on.local_experts == 32
    curve = [on.linear_step_bytes(n) for n in (1, 4, 16, 64, 256, 4096)]
    assert all(a < b for a, b in pairwise(curve))
    assert curve[0] - on.linear_bytes == pytest.approx(whole_expert * 8 * 32 / 128)  # expected 2 local experts
    assert curve[-1] - on.linear_bytes == pytest.approx(whole_expert * 32, rel=1e-6)  # all local experts
    for n in (1, 16, 256):
        assert on.linear_step_bytes(n) == pytest.approx(off.linear_step_bytes(n))
        assert on.device_s(n, n, n, n * 1024, n * 1024) == pytest.approx(off.device_s(n, n, n, n * 1024, n * 1024))
    assert expected_local_experts_touched(16, 128, 8, 32) == pytest.approx(expected_experts_touched(16, 128, 8) / 4)


def test_tensor_parallel_suggestion_stops_where_expert_parallel_stops_shrinking():
    # Mixtral (8 experts) on 16 GB GPUs: without expert parallel 16 GPUs each hold 1/16 of every expert and
    # fit; with it the weights per GPU stop shrinking at 8 (one whole expert each, ranks 8-15 idle), 8 GPUs
    # do not fit, so no size up to 16 is suggested.
    gpu = "hardware.gpu={name: g16, memory_bytes: 16_000_000_000, bf16_tflops: 100, memory_bandwidth_gbps: 900,"
    gpu += " interconnect_bandwidth_gbps: 300}"
    base = ("model=mixtral-8x7b", gpu, "engine.max_model_len=4096")

    def at(tp: int, ep: str):
        return load_scenario(
            QWEN3_MOE, (*base, f"hardware.tensor_parallel_size={tp}", f"hardware.expert_parallel={ep}")
        )

    dense, _ = at(8, "true").model.weight_bytes(2)
    split = dense - replicated_weights(at(8, "true").model, 2)[1]  # the routers are whole on every rank
    weights = {tp: EngineFacts.of(at(tp, "true")).weights_bytes for tp in (8, 16)}
    assert weights[8] - weights[16] == pytest.approx(split / 8 - split / 16, abs=2)
    off, on = at(2, "false"), at(2, "true")
    facts = EngineFacts.of(off)
    assert tensor_parallel_that_fits(facts, memory_breakdown(facts)) == 16
    facts = EngineFacts.of(on)
    assert tensor_parallel_that_fits(facts, memory_breakdown(facts)) is None


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ("model=qwen3-8b", "hardware.tensor_parallel_size=2", "hardware.expert_parallel=true"),
            r"hardware\.expert_parallel = true: is only for mixture-of-experts models; qwen3-8b is dense.*allowed: false",
        ),
        (
            ("hardware.expert_parallel=true",),
            r"hardware\.expert_parallel = true: needs hardware\.tensor_parallel_size or data_parallel_size > 1.*allowed",
        ),
        (("hardware.expert_parallel=yes",), r"hardware\.expert_parallel = \"yes\": expected true or false"),
        (("hardware.expert_parallel=2",), r"hardware\.expert_parallel = 2: expected true or false"),
    ],
)
def test_bad_expert_parallel_names_file_key_value_and_allowed(overrides, expected):
    with pytest.raises(ScenarioError) as info:
        load_scenario(QWEN3_MOE, overrides)
    message = str(info.value)
    assert message.startswith(str(QWEN3_MOE)), message
    assert re.search(expected, message), message


def test_default_is_off_and_dense_scenarios_are_unchanged():
    s = load_scenario(QWEN3_MOE)
    assert s.hardware.expert_parallel is False and EngineFacts.of(s).expert_parallel_size == 1
    assert "--enable-expert-parallel" not in vllm_serve_command(s)


def test_serve_line_passes_the_flag():
    s = _load(QWEN3_MOE, 2, True)
    line = vllm_serve_command(s)
    assert "--tensor-parallel-size 2" in line and line.endswith("--enable-expert-parallel")
    assert "--enable-expert-parallel" not in vllm_serve_command(_load(QWEN3_MOE, 2, False))


def test_sizing_candidates_keep_expert_parallel_where_there_is_more_than_one_gpu():
    from planner.sizing.candidates import enumerate_candidates
    from planner.sizing.spec import load_sizing

    q = load_sizing(
        QWEN3_MOE,
        (
            "hardware.tensor_parallel_size=2",
            "hardware.expert_parallel=true",
            "search.candidates.gpus=[h100-sxm]",
            "search.candidates.tensor_parallel_sizes=[1, 2, 4]",
        ),
    )
    candidates, _ = enumerate_candidates(q)
    by_tp = {c.tensor_parallel_size: c.scenario for c in candidates}
    assert set(by_tp) == {1, 2, 4}
    assert not by_tp[1].hardware.expert_parallel and "--enable-expert-parallel" not in vllm_serve_command(by_tp[1])
    for tp in (2, 4):
        assert by_tp[tp].hardware.expert_parallel and "--enable-expert-parallel" in vllm_serve_command(by_tp[tp])


def test_a_moe_config_whose_every_layer_is_dense_takes_no_expert_parallel(tmp_path):
    # mlp_only_layers listing every layer leaves no experts to place: vLLM ignores the flag there, so it is refused.
    raw = yaml.safe_load(resources.files("planner.catalog").joinpath("models.yaml").read_text())["qwen3-30b-a3b"]
    config = {k: v for k, v in raw.items() if k != "published_params"}
    config["mlp_only_layers"] = list(range(config["num_hidden_layers"]))
    (tmp_path / "config.json").write_text(json.dumps(config))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"model: {tmp_path}\nhardware: {{gpu: h100-sxm, tensor_parallel_size: 2, expert_parallel: true}}\n"
        "workload: {arrival: {rate: 1}}\n"
    )
    with pytest.raises(
        ScenarioError, match="expert_parallel = true: is only for mixture-of-experts models; .* is dense"
    ):
        load_scenario(scenario)
