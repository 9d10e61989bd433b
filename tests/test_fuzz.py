"""Property-based fuzzing of everything a user hands to `planner` (issue 12): scenario keys (every numeric and
choice key, with plausible and hostile values: huge, non-finite, booleans, YAML 1.1 forms, nesting, control
characters), trace files (CSV and JSON Lines) and `compare` inputs.

The property: exit 0 or 2, never a traceback, each case within PLANNER_FUZZ_CASE_S seconds; exit 2 prints one
line naming the file or the key; exit 0 prints figures that are finite, non-negative, with ordered
percentiles, utilisations in [0, 1] and throughput = completed / duration.

CI runs a few dozen derandomized cases per test (well under a minute). A longer, random run:
    PLANNER_FUZZ_EXAMPLES=2000 pytest -q tests/test_fuzz.py
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent
A10 = ROOT / "scenarios" / "a10_qwen7b.yaml"
LONG_RUN = "PLANNER_FUZZ_EXAMPLES" in os.environ
CASE_S = float(os.environ.get("PLANNER_FUZZ_CASE_S", "10"))


def fuzz_settings(ci_examples: int):
    return settings(
        max_examples=int(os.environ.get("PLANNER_FUZZ_EXAMPLES", ci_examples)),
        deadline=None,  # timed by run() instead: one slow case is a failure with its own message
        derandomize=not LONG_RUN,  # CI sees the same cases every time; a long run explores
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )


def run(argv: list[str]) -> tuple[int, str, str]:
    """`planner argv` in this process: (exit code, stdout, stderr). Any exception escaping main fails the test."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    elapsed = time.perf_counter() - start
    assert elapsed < CASE_S, f"planner {' '.join(argv)[:300]} took {elapsed:.1f} s"
    assert code in (0, 2), (code, err.getvalue())
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


def one_error_line(err: str) -> str:
    # a warning (a length distribution clipping changed) may come before the error
    lines = [line for line in err.strip().splitlines() if not line.startswith("planner: warning: ")]
    assert len(lines) >= 1 and all(line.startswith("planner: error: ") for line in lines), err
    return lines[0]


# --- values -------------------------------------------------------------------------------------------------

HOSTILE = [
    "true", "false", "yes", "no", "on", "off", "null", "~", "[]", "{}", "[1, 2]", "{a: 1}", "'12'", "1:20",
    "0x1F", "0o17", "012", "1e400", "-1e400", ".inf", "-.inf", ".nan", "5e-324", "1e-300", "-0", "'\\u0007'",
    "9" * 5000, "1" + "0" * 40, "-1", "0", "2147483648", "9223372036854775807", "18446744073709551616", "[" * 200,
    "&a 1", "*a", "!!binary aGVsbG8=", "!!python/object/apply:os.system [ls]", "2001-12-14", '"\\x00"', "'\u0085'",
    "\t", "''", "abc", "a: b: c", "-", "1.0e+30", "1e30", "0.0", "0.5", "1.5",
]  # fmt: skip
NUMBERS = st.one_of(
    st.integers(-10, 5000).map(str),
    st.integers(-(2**80), 2**80).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(min_value=0, max_value=1e7).map(lambda x: f"{x:.6g}"),
)
HOSTILE_VALUES = st.one_of(st.sampled_from(HOSTILE), NUMBERS, st.text(max_size=12).map(json.dumps))


def choice(*words: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(words), HOSTILE_VALUES)


def ints(lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.one_of(st.integers(lo, hi).map(str), HOSTILE_VALUES)


def floats(lo: float, hi: float) -> st.SearchStrategy[str]:
    return st.one_of(st.floats(lo, hi).map(lambda x: f"{x:.6g}"), HOSTILE_VALUES)


BOOLS = choice("true", "false")
LENGTH_KEYS = (
    {"dist": choice("fixed", "uniform", "normal", "lognormal", "trace")}
    | {name: ints(1, 9000) for name in ("value", "low", "high", "min", "max")}
    | {"mean": floats(1, 9000), "std": floats(0, 5000)}
)
GPU_MAPPING = st.fixed_dictionaries(
    {"memory_bytes": NUMBERS, "bf16_tflops": NUMBERS, "memory_bandwidth_gbps": NUMBERS},
    optional={"interconnect_bandwidth_gbps": NUMBERS, "fp8_tflops": NUMBERS},
).map(lambda d: "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}")
MODEL_MAPPING = st.fixed_dictionaries(
    {
        "model_type": choice("llama", "qwen2", "mistral"),
        **{
            key: ints(1, 4096)
            for key in (
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "vocab_size",
                "max_position_embeddings",
            )
        },
    },
    optional={"head_dim": ints(1, 512), "rope_theta": NUMBERS, "tie_word_embeddings": BOOLS},
).map(lambda d: "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}")
SCHEMA: dict[str, st.SearchStrategy[str]] = {
    "model": st.one_of(MODEL_MAPPING, choice("qwen-7b", "llama-2-7b", "/dev/zero", "/nonexistent")),
    "name": st.one_of(st.text(max_size=20).map(json.dumps), HOSTILE_VALUES),
    "dtype": choice("bfloat16", "float16", "float32"),
    "hardware.tensor_parallel_size": ints(1, 64),
    "hardware.replicas": ints(1, 4),
    "hardware.router": choice("round_robin", "least_outstanding"),
    "hardware.gpu": st.one_of(GPU_MAPPING, choice("a10", "h100-sxm", "cpu")),
    "engine.scheduler": choice("continuous", "static"),
    "engine.kv_cache": choice("paged", "contiguous"),
    "engine.block_size": ints(1, 512),
    "engine.gpu_memory_utilization": floats(0, 1),
    "engine.max_num_seqs": ints(1, 512),
    "engine.max_num_batched_tokens": ints(1, 20000),
    "engine.max_model_len": ints(1, 9000),
    "engine.enable_chunked_prefill": BOOLS,
    "engine.enable_prefix_caching": BOOLS,
    "engine.kv_cache_dtype": choice("auto", "fp8", "float16"),
    "engine.num_gpu_blocks_override": ints(1, 5000),
    "workload.seed": ints(0, 2**64),
    "workload.too_long": choice("reject", "truncate"),
    "workload.arrival.process": choice("poisson", "gamma", "constant", "closed", "trace"),
    "workload.arrival.rate": floats(1e-7, 1e7),
    "workload.arrival.burstiness": floats(1e-4, 1e4),
    "workload.arrival.concurrency": ints(1, 100),
    "workload.arrival.think_time_s": floats(0, 100),
    **{f"workload.prompt_tokens.{k}": v for k, v in LENGTH_KEYS.items()},
    **{f"workload.output_tokens.{k}": v for k, v in LENGTH_KEYS.items()},
    "workload.shared_prefix": st.tuples(ints(1, 2000), ints(1, 64)).map(
        lambda t: f"{{tokens: {t[0]}, group_size: {t[1]}}}"
    ),
    "slo.ttft_ms.p99": floats(0, 1e5),
    "slo.itl_ms.p50": floats(0, 1e5),
    "slo.tpot_ms.mean": floats(0, 1e5),
    "slo.e2el_ms.p99.9": floats(0, 1e5),
}
OVERRIDES = st.lists(
    st.sampled_from(sorted(SCHEMA)).flatmap(lambda key: SCHEMA[key].map(lambda value: (key, value))),
    min_size=1,
    max_size=3,
)
KEY_WORDS = re.compile(r"\b(model|hardware|engine|workload|slo|dtype|name)\b|--set|cannot run")


def assert_names_a_key(err: str, overrides: list[tuple[str, str]], source: str) -> None:
    line = one_error_line(err)
    leaves = {key.split(".")[-1] for key, _ in overrides}
    assert source in line or "--set" in line, line
    assert any(leaf in line for leaf in leaves) or KEY_WORDS.search(line), line


# --- the properties -----------------------------------------------------------------------------------------


@fuzz_settings(60)
@given(overrides=OVERRIDES, num_requests=ints(1, 50))
def test_validate_any_scenario_values(overrides, num_requests):
    sets = [f"{k}={v}" for k, v in overrides] + [f"workload.num_requests={num_requests}"]
    code, _, err = run(["validate", str(A10), *[a for s in sets for a in ("--set", s)]])
    if code == 2:
        assert_names_a_key(err, [*overrides, ("workload.num_requests", num_requests)], str(A10))


@fuzz_settings(25)
@given(overrides=OVERRIDES, num_requests=st.integers(1, 30))
def test_simulate_any_scenario_values(overrides, num_requests):
    sets = [f"{k}={v}" for k, v in overrides] + [f"workload.num_requests={num_requests}"]
    code, out, err = run(["simulate", str(A10), "--json", *[a for s in sets for a in ("--set", s)]])
    if code == 2:
        assert_names_a_key(err, overrides, str(A10))
    else:
        check_summary(json.loads(out, parse_constant=_refuse_constant), num_requests)


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"the summary holds {name}")


def check_summary(s: dict, num_requests: int) -> None:
    """What every accepted run's figures must satisfy."""
    for path, value in _numbers(s):
        assert math.isfinite(value), path
        if not path.startswith(("scenario.", "cost_model.")):
            assert value >= 0, (path, value)
    assert s["completed"] + s["num_rejected"] == num_requests == s["num_requests"]
    for metric in ("ttft", "tpot", "itl", "e2el"):
        p50, p90, p99 = (s[f"{p}_{metric}_ms"] for p in ("p50", "p90", "p99"))
        if p50 is not None:
            assert p50 <= p90 <= p99 and s[f"median_{metric}_ms"] == p50, metric
    for value in (s["kv_cache_utilization"]["mean"], s["kv_cache_utilization"]["peak"], s["kv_slot_utilization"]):
        assert 0 <= value <= 1 + 1e-12, value
    if s["duration_s"] > 0:
        assert math.isclose(s["request_throughput"], s["completed"] / s["duration_s"], rel_tol=1e-9)


def _numbers(value, path: str = ""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, f"{path}{k}.")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{path}{i}.")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path.rstrip("."), value


CELLS = st.one_of(
    st.integers(0, 3000).map(str),
    st.floats(0, 3000).map(repr),
    st.sampled_from(["", "nan", "inf", "-inf", "-1", "-0", "1e400", "1e30", "abc", '"3"', "1,2", "\x00", "\u00e9"]),
    st.floats().map(repr),
    st.text(max_size=6),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def trace_files(draw) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["csv", "jsonl", "binary"]))
    rows = draw(st.integers(0, 6))
    if kind == "binary":
        return "t.csv", draw(st.binary(max_size=200))
    if kind == "csv":
        header = draw(st.sampled_from(["t,p,o", "t,p", "p,o,t", "t,p,o,extra"]))
        lines = [",".join(draw(CELLS) for _ in range(draw(st.integers(1, 4)))) for _ in range(rows)]
        return "t.csv", "\n".join([header, *lines]).encode("utf-8", "surrogatepass")
    records = []
    for _ in range(rows):
        if draw(st.booleans()):
            records.append({"t": draw(JSON_VALUES), "p": draw(JSON_VALUES), "o": draw(JSON_VALUES)})
        else:
            records.append(draw(JSON_VALUES))
    return "t.jsonl", "\n".join(json.dumps(r) for r in records).encode("utf-8", "surrogatepass")


TRACE_SCENARIO = """\
model: qwen-7b
hardware: {gpu: a10}
engine: {max_model_len: 4096}
workload:
  num_requests: 12
  arrival: {process: trace}
  prompt_tokens: {dist: trace}
  output_tokens: {dist: trace, max: 300}
  trace: {path: %s, arrival_column: t, prompt_column: p, output_column: o}
"""


@fuzz_settings(40)
@given(trace=trace_files())
def test_simulate_any_trace_file(trace):
    name, content = trace
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / name).write_bytes(content)
        scenario = Path(tmp) / "s.yaml"
        scenario.write_text(TRACE_SCENARIO % name)
        code, out, err = run(["simulate", str(scenario), "--json"])
        if code == 2:
            line = one_error_line(err)
            assert name in line or "workload.trace" in line, line
        else:
            check_summary(json.loads(out, parse_constant=_refuse_constant), 12)


METRIC_VALUES = st.one_of(st.floats(), st.integers(-(2**70), 2**70), JSON_VALUES)


@st.composite
def summary_files(draw) -> bytes:
    kind = draw(st.sampled_from(["metrics", "json", "binary", "utf16", "text"]))
    if kind == "binary":
        return draw(st.binary(max_size=100))
    if kind == "text":
        return draw(st.text(max_size=40)).encode("utf-8", "surrogatepass")
    if kind == "json":
        data = draw(JSON_VALUES)
    else:
        keys = ["request_throughput", "p99_ttft_ms", "mean_itl_ms", "mode", "memory"]
        data = {k: draw(METRIC_VALUES) for k in draw(st.lists(st.sampled_from(keys), max_size=4))}
    text = json.dumps(data)
    return text.encode("utf-16") if kind == "utf16" else text.encode("utf-8", "surrogatepass")


@fuzz_settings(40)
@given(a=summary_files(), b=summary_files(), as_json=st.booleans())
def test_compare_any_summary_files(a, b, as_json):
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "a.json", Path(tmp) / "b.json"]
        paths[0].write_bytes(a)
        paths[1].write_bytes(b)
        code, out, err = run(["compare", *map(str, paths), *(["--json"] if as_json else [])])
        if code == 2:
            line = one_error_line(err)
            assert str(paths[0]) in line or str(paths[1]) in line, line
        elif as_json:
            assert json.loads(out)["rows"], out
        else:
            assert len(out.strip().splitlines()) >= 2, out
