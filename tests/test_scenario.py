"""The scenario file format: defaults, every class of error message, overrides (the files a scenario refers to,
and inline specs: tests/test_scenario_sources.py)."""

from __future__ import annotations

import json
import re

import pytest
from helpers.scenario_files import INLINE_MODEL, MINIMAL, RATE, load_error, write

from planner.errors import PlannerError, ScenarioError
from planner.scenario.load import load_scenario, scenario_to_dict, validate_mapping
from sim.config import ArrivalConfig, EngineConfig, WorkloadConfig
from sim.engine_facts import EngineFacts


def test_minimal_file_gets_defaults(tmp_path):
    s = load_scenario(write(tmp_path, MINIMAL, "a10_qwen7b.yaml"))
    assert s.name == "a10_qwen7b"  # the file's stem
    assert s.model.name == "qwen-7b" and s.hardware.gpu.name == "a10"
    assert s.dtype == "bfloat16"
    assert s.hardware.tensor_parallel_size == 1 and s.hardware.replicas == 1
    assert s.hardware.router == "round_robin"
    # engine: the dataclass defaults, with max_model_len filled in from the model
    assert s.engine == EngineConfig(max_model_len=s.model.max_position_embeddings)
    assert s.max_model_len == s.model.max_position_embeddings
    assert s.workload == WorkloadConfig(arrival=ArrivalConfig(rate=2.0))
    assert s.slo.ttft_ms == {} and s.source == str(tmp_path / "a10_qwen7b.yaml")


def test_full_example_file(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n")
    s = load_scenario(
        write(
            tmp_path,
            """\
            name: my_run
            model: qwen-7b
            dtype: float16
            hardware: {gpu: a10, tensor_parallel_size: 2, replicas: 3, router: least_outstanding}
            engine:
              scheduler: static
              kv_cache: contiguous
              block_size: 32
              gpu_memory_utilization: 0.8
              max_num_seqs: 64
              max_num_batched_tokens: 4096
              max_model_len: 4096
              enable_chunked_prefill: false
              enable_prefix_caching: true
              kv_cache_dtype: fp8
              num_gpu_blocks_override: 1000
            workload:
              num_requests: 200
              seed: 7
              arrival: {process: trace, rate: 2}
              prompt_tokens: {dist: trace}
              output_tokens: {dist: normal, mean: 15, std: 3, min: 1, max: 40}
              trace: {path: traces/t.csv, row_order: sample}
              shared_prefix: {tokens: 512, group_size: 8}
              too_long: truncate
            slo:
              ttft_ms: {p99: 500}
              tpot_ms: {p50: 20, p99.9: 50.5, mean: 30}
            """,
        )
    )
    assert s.name == "my_run" and s.dtype == "float16" and s.kv_dtype == "fp8"
    assert s.hardware.replicas == 3 and s.hardware.router == "least_outstanding"
    assert s.engine.max_model_len == 4096 and s.engine.enable_chunked_prefill is False
    assert s.workload.arrival.rate == 2.0 and isinstance(s.workload.arrival.rate, float)
    assert s.workload.output_tokens.max == 40
    assert s.workload.trace.path == str(tmp_path / "traces" / "t.csv")
    assert s.workload.trace.row_order == "sample"
    assert s.slo.ttft_ms == {"p99": 500.0} and s.slo.tpot_ms["p99.9"] == 50.5


@pytest.mark.parametrize(
    "override, expected",
    [
        # misspelled key: did-you-mean and the allowed keys
        (
            "engine.max_num_seq=128",
            r"scen\.yaml: engine\.max_num_seq: unknown key \(did you mean max_num_seqs\?\); allowed: .*max_num_seqs",
        ),
        ("hardwre.gpu=a10", r"hardwre: unknown key \(did you mean hardware\?\)"),
        ("search={}", r"search: unknown key \(a sizing file's section: planner size reads it\); allowed: name"),
        (
            "workload.arrival.rate=-1",
            r"scen\.yaml: workload\.arrival\.rate = -1\.0: must be in \[1e-06, 1e\+06\] requests/s",
        ),
        ("workload.arrival.burstiness=0", r"workload\.arrival\.burstiness = 0\.0: must be in \[0\.001, 1000\]"),
        (
            "engine.gpu_memory_utilization=1.5",
            r"scen\.yaml: engine\.gpu_memory_utilization = 1\.5: must be in \(0, 1\]",
        ),
        ("engine.block_size=12", r"engine\.block_size = 12: must be a power of two"),
        ("engine.max_num_seqs=0", r"engine\.max_num_seqs = 0: must be in \[1, 65,536\]"),
        ("workload.num_requests=0", r"workload\.num_requests = 0: must be in \[1, 10,000,000\]"),
        ("workload.seed=-1", r"workload\.seed = -1: must be in \[0, 9,223,372,036,854,775,807\]"),
        ("hardware.replicas=0", r"hardware\.replicas = 0: must be in \[1, 1,024\]"),
        # enumerations list their values
        (
            "engine.scheduler=continous",
            r"engine\.scheduler = \"continous\": must be one of continuous, static \(did you mean continuous\?\)",
        ),
        ("hardware.router=random", r"hardware\.router = \"random\": must be one of round_robin, least_outstanding"),
        ("dtype=int8", r"dtype = \"int8\": must be one of bfloat16, float16, float32"),
        ("workload.arrival.process=burst", r"must be one of poisson, gamma, constant, closed, trace"),
        # wrong types name the expected type; bool is not an int
        ("engine.max_num_seqs='8'", r"engine\.max_num_seqs = \"8\": expected an integer"),
        ("engine.max_num_seqs=8.0", r"engine\.max_num_seqs = 8\.0: expected an integer"),
        ("workload.seed=true", r"workload\.seed = true: expected an integer"),
        ("engine.gpu_memory_utilization=high", r"= \"high\": expected a number"),
        ("engine.enable_chunked_prefill=1", r"engine\.enable_chunked_prefill = 1: expected true or false"),
        ("workload.arrival.rate='1e3'", r"= \"1e3\": expected a number .*this is text"),
        ("engine=[1, 2]", r"engine = \[1, 2\]: expected a mapping with keys scheduler, "),
        ("workload.arrival.rate=.nan", r"must be a finite number"),
        # catalog names
        (
            "hardware.gpu=a100",
            r"hardware\.gpu = \"a100\": unknown GPU \(did you mean a100-40gb or a100-80gb\?\); a catalog GPU \(a10, .*h100",
        ),
        (
            "model=qwen7b",
            r"model = \"qwen7b\": not a catalog model \(did you mean qwen-7b\?\).*catalog models: .*qwen-7b",
        ),
        # distributions and processes need their parameters
        ("workload.prompt_tokens={dist: fixed}", r"workload\.prompt_tokens\.value: missing; dist fixed needs value"),
        (
            "workload.prompt_tokens={dist: uniform, low: 5}",
            r"workload\.prompt_tokens\.high: missing; dist uniform needs low, high",
        ),
        (
            "workload.output_tokens={dist: uniform, low: 9, high: 5}",
            r"workload\.output_tokens\.low = 9: must be <= high \(5\)",
        ),
        (
            "workload.output_tokens={dist: fixed, value: 9, mean: 3}",
            r"output_tokens\.mean = 3\.0: not used by dist fixed",
        ),
        (
            "workload.output_tokens={value: 9}",
            r"workload\.output_tokens\.dist: missing; required: a string \(must be one of fixed, uniform",
        ),
        (
            "workload.output_tokens={dist: normal, mean: 9, std: 1, min: 5, max: 3}",
            r"output_tokens\.min = 5: must be <= max \(3\)",
        ),
        (  # every length would be clipped to max: changed without a word
            "workload.prompt_tokens={dist: fixed, value: 100, max: 10}",
            r"prompt_tokens\.value = 100: must be within \[min 1, max 10\], which clip every length",
        ),
        (
            "workload.prompt_tokens={dist: uniform, low: 5, high: 8, min: 10}",
            r"prompt_tokens\.low = 5: with high 8: the range must overlap \[min 10, no max\]",
        ),
        ("workload.prompt_tokens.dist=trace", r"workload\.prompt_tokens\.dist = \"trace\": needs workload\.trace"),
        ("workload.arrival={process: trace}", r"workload\.arrival\.process = \"trace\": needs workload\.trace"),
        (
            "workload.arrival={process: closed}",
            r"workload\.arrival\.concurrency: missing; process closed needs concurrency",
        ),
        ("workload.arrival={process: gamma}", r"workload\.arrival\.rate: missing; process gamma needs rate"),
        ("workload.arrival.rate=null", r"workload\.arrival\.rate: missing; process poisson needs rate \(requests/s\)"),
        ("workload.arrival={process: constant}", r"workload\.arrival\.rate: missing; process constant needs rate"),
        ("workload.shared_prefix={tokens: 8}", r"workload\.shared_prefix\.group_size: missing; required: an integer"),
        # SLOs
        (
            "slo.ttft_ms={p999: 5}",
            r"slo\.ttft_ms\.p999: unknown statistic \(did you mean p99\?\); allowed: mean or pNN",
        ),
        ("slo.ttft_ms={p100: 5}", r"slo\.ttft_ms\.p100: unknown statistic"),
        ("slo.tpot_ms={p99: 0}", r"slo\.tpot_ms\.p99 = 0\.0: must be in \(0, 1e\+09\] ms"),
        ("slo.latency_ms={p99: 5}", r"slo\.latency_ms: unknown key; allowed: ttft_ms, tpot_ms, itl_ms, e2el_ms"),
        # relations with the model (qwen-7b: 32 heads, 32 KV heads, 8192 positions)
        (
            "hardware.tensor_parallel_size=3",
            (
                r"hardware\.tensor_parallel_size = 3: must divide the model's num_attention_heads \(32\).*valid sizes"
                r" for qwen-7b: 1, 2, 4, 8, 16, 32"
            ),
        ),
        (
            "engine.max_model_len=10000",
            r"engine\.max_model_len = 10000: must be <= the model's max_position_embeddings \(8192\)",
        ),
        ("engine.max_num_seqs=4096", r"engine\.max_num_batched_tokens = 2048: must be >= max_num_seqs \(4096\)"),
        ("name=''", r"name = \"\": must not be empty"),
        ("source=x", r"source: unknown key"),
    ],
)
def test_errors_name_file_key_value_and_allowed(tmp_path, override, expected):
    path = write(tmp_path, MINIMAL)
    message = load_error(path, (override,))
    assert re.search(expected, message), message
    assert message.startswith(str(path)) and "\n" not in message


def test_errors_are_scenario_errors_with_parts(tmp_path):
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(tmp_path, MINIMAL), ("engine.gpu_memory_utilization=1.5",))
    err = info.value
    assert (err.key_path, err.value, err.allowed) == ("engine.gpu_memory_utilization", 1.5, "must be in (0, 1]")
    assert isinstance(err, PlannerError)


def test_error_in_the_file_itself(tmp_path):
    path = write(tmp_path, MINIMAL + "engine:\n  max_num_seq: 128\n", "x.yaml")
    assert load_error(path).startswith(f"{path}: engine.max_num_seq: unknown key (did you mean max_num_seqs?)")


def test_chunked_prefill_off_token_budget(tmp_path):
    path = write(tmp_path, MINIMAL + "engine: {enable_chunked_prefill: false}\n")
    # Not given: vLLM's default without chunked prefill, max(max_model_len, 2048).
    assert load_scenario(path).engine.max_num_batched_tokens == 8192
    assert load_scenario(path, ("engine.max_model_len=1024",)).engine.max_num_batched_tokens == 2048
    message = load_error(path, ("engine.max_num_batched_tokens=4096",))
    assert "engine.max_num_batched_tokens = 4096: is smaller than max_model_len (8192)" in message
    assert "raise max_num_batched_tokens, lower max_model_len or enable chunked prefill" in message
    assert load_scenario(path, ("engine.max_num_batched_tokens=4096", "engine.max_model_len=4096"))


def test_tensor_parallel_kv_heads_follow_vllm(tmp_path):
    # 12 query heads, 4 KV heads: tp 2 splits KV heads, tp 4 splits them one each, tp 12 replicates each 3x;
    # tp 6 divides the query heads but neither divides nor is a multiple of 4 KV heads.
    path = write(tmp_path, f"model: {json.dumps(INLINE_MODEL)}\nhardware: {{gpu: a10}}\n" + RATE)
    for tp in (1, 2, 4, 12):
        assert load_scenario(path, (f"hardware.tensor_parallel_size={tp}",)).hardware.tensor_parallel_size == tp
    message = load_error(path, ("hardware.tensor_parallel_size=6",))
    assert "hardware.tensor_parallel_size = 6: must divide" in message and "num_key_value_heads (4)" in message


@pytest.mark.parametrize(
    "text, expected",
    [
        ("model: qwen-7b\nhardware:\n  gpu: a10\n engine: {}\n", r"line 4, column 2: invalid YAML"),
        ("model: [qwen-7b\nhardware: {gpu: a10}\n", r"line \d+, column \d+: invalid YAML"),
        (
            "model: qwen-7b\nhardware: {gpu: a10}\nmodel: llama-2-7b\n",
            r"line 3, column 1: invalid YAML.*duplicate key 'model'",
        ),
        ("", r"the file is empty"),
        ("# only a comment\n", r"the file is empty"),
        ("- model\n- hardware\n", r"top level = \[\"model\", \"hardware\"\]: must be a mapping with keys name, model"),
        ("just text\n", r"top level = \"just text\": must be a mapping"),
        ("hardware: {gpu: a10}\n", r"model: missing; required: a catalog model \(.*qwen-7b.*\), a path"),
        ("model: qwen-7b\nhardware: {replicas: 2}\n", r"hardware\.gpu: missing; required: a catalog GPU \(.*a10"),
        ("model: qwen-7b\nhardware:\n", r"hardware\.gpu: missing"),
        ("model: qwen-7b\n", r"hardware: missing; required: a mapping with keys gpu,"),
        ("model: 7\nhardware: {gpu: a10}\n", r"model = 7: expected a catalog model"),
    ],
)
def test_file_level_errors(tmp_path, text, expected):
    path = write(tmp_path, text)
    message = load_error(path)
    assert re.search(expected, message), message
    assert message.startswith(str(path))


def test_overrides_apply_and_are_validated(tmp_path):
    path = write(tmp_path, MINIMAL)
    s = load_scenario(
        path,
        (
            "engine.max_num_seqs=4",
            "engine.enable_prefix_caching=true",
            "engine.num_gpu_blocks_override=null",
            "workload.arrival={process: gamma, rate: 3, burstiness: 0.5}",  # creates the mapping
            "workload.shared_prefix.tokens=64",  # creates intermediate mappings
            "workload.shared_prefix.group_size=4",
            "hardware.gpu=h200",
            "slo.ttft_ms.p99=250",
            "name=sweep 1",
        ),
    )
    assert s.engine.max_num_seqs == 4 and s.engine.enable_prefix_caching is True
    assert s.workload.arrival.process == "gamma" and s.workload.arrival.burstiness == 0.5
    assert s.workload.shared_prefix.tokens == 64 and s.hardware.gpu.name == "h200"
    assert s.slo.ttft_ms == {"p99": 250.0} and s.name == "sweep 1"
    # an empty file plus overrides is a scenario
    empty = write(tmp_path, "", "empty.yaml")
    assert (
        load_scenario(empty, ("model=qwen-7b", "hardware.gpu=a10", "workload.arrival.rate=1")).model.name == "qwen-7b"
    )


@pytest.mark.parametrize(
    "override, expected",
    [
        ("engine.max_num_seqs", r"--set engine\.max_num_seqs: expected dotted\.key=value"),
        ("=4", r"--set =4: expected dotted\.key=value"),
        ("engine..x=4", r"--set engine\.\.x=4: expected dotted\.key=value"),
        ("engine.max_num_seqs=[1", r"--set engine\.max_num_seqs=\[1: line 1, column 3: invalid YAML"),
        ("model.hidden_size=4", r"--set model\.hidden_size=4: .*scen\.yaml: model is \"qwen-7b\", not a mapping"),
    ],
)
def test_malformed_overrides(tmp_path, override, expected):
    message = load_error(write(tmp_path, MINIMAL), (override,))
    assert re.search(expected, message), message


def test_validate_mapping_directly(tmp_path):
    data = {"model": "qwen-7b", "hardware": {"gpu": "a10"}, "workload": {"arrival": {"rate": 1}}}
    s = validate_mapping(data, "<test>", tmp_path)
    assert s.source == "<test>" and s.model.name == "qwen-7b"
    with pytest.raises(ScenarioError, match=r"^<test>: engine\.block_size = 3: must be a power of two"):
        validate_mapping({**data, "engine": {"block_size": 3}}, "<test>", tmp_path)


def test_null_section_means_defaults(tmp_path):
    s = load_scenario(write(tmp_path, "model: qwen-7b\nhardware: {gpu: a10}\nengine:\nslo:\n" + RATE))
    assert s.engine.block_size == 16 and s.slo.ttft_ms == {}
    # a null workload is its defaults, and the default poisson process needs a rate
    message = load_error(write(tmp_path, "model: qwen-7b\nhardware: {gpu: a10}\nworkload:\n"))
    assert message.endswith("workload.arrival.rate: missing; process poisson needs rate (requests/s)")


def test_scenario_to_dict_is_json(tmp_path):
    s = load_scenario(write(tmp_path, MINIMAL + "slo: {ttft_ms: {p99: 500}}\n"))
    d = json.loads(json.dumps(scenario_to_dict(s)))
    assert d["model"]["hidden_size"] == 4096 and d["model"]["num_params"] == s.model.num_params
    assert d["hardware"]["gpu"]["memory_bytes"] == s.hardware.gpu.memory_bytes
    assert d["engine"]["max_model_len"] == 8192 and d["max_model_len"] == 8192 and d["kv_dtype"] == "bfloat16"
    assert d["slo"]["ttft_ms"] == {"p99": 500.0} and d["workload"]["prompt_tokens"]["value"] == 128


def test_a_catalog_gpu_without_a_link_bandwidth_is_not_called_an_inline_mapping(tmp_path):
    path = write(tmp_path, "model: tiny-llama\nhardware: {gpu: cpu, tensor_parallel_size: 2}\n" + RATE)
    assert load_error(path).endswith(
        "PCIe Gen4 x16 32); the catalog's cpu has none: give hardware.gpu as a mapping of its fields with it"
    )


def test_a_tensor_parallel_advice_says_what_the_gpu_lacks_for_it(tmp_path):
    # The advice on an inline GPU without a link bandwidth was then refused for that very field.
    from helpers.scenario_files import INLINE_GPU

    from sim.memory import memory_breakdown
    from sim.memory_fit import fit_problems

    data = {"model": "qwen2.5-32b", "hardware": {"gpu": INLINE_GPU}, "workload": {"arrival": {"rate": 1.0}}}
    scenario = validate_mapping(data, "<test>", tmp_path)
    facts = EngineFacts.of(scenario)
    (problem,) = fit_problems(facts, memory_breakdown(facts))
    assert re.search(
        r"hardware.tensor_parallel_size \d+ \(with the GPU.s interconnect_bandwidth_gbps, which it lacks\)", problem
    )
