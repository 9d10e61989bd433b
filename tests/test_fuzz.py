"""Property-based fuzzing of everything a user hands to `planner` (issue 12): scenario keys (every numeric and
choice key, with plausible and hostile values: huge, non-finite, booleans, YAML 1.1 forms, nesting, control
characters), trace files (CSV and JSON Lines) and `compare` inputs.

The property: exit 0 or 2, never a traceback, each case within PLANNER_FUZZ_CASE_S seconds; exit 2 prints one
line naming the file or the key; exit 0 prints figures that are finite, non-negative, with ordered
percentiles, utilisations in [0, 1] and throughput = completed / duration.

Each case mixes values drawn to be valid with hostile ones, so that both properties are exercised: every test
checks that at least MIN_ACCEPTED of its cases were accepted (a fuzzer that only meets refusals proves nothing
of the figures), and a case whose valid values alone are accepted and whose hostile ones are refused must be
refused naming a hostile key (the key that was broken, not just any key).

CI runs a few dozen derandomized cases per test (well under a minute). A longer, random run:
    PLANNER_FUZZ_EXAMPLES=2000 pytest -q tests/test_fuzz.py
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path

from helpers import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli import main

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


def fmt(lo: float, hi: float) -> st.SearchStrategy[str]:
    return st.floats(lo, hi).map(lambda x: f"{x:.4g}")


def pair(template: str, a: st.SearchStrategy, b: st.SearchStrategy) -> st.SearchStrategy[str]:
    return st.tuples(a, b).map(lambda t: template.format(*t))


LENGTHS = st.one_of(
    st.integers(1, 300).map(lambda n: f"{{dist: fixed, value: {n}}}"),
    st.tuples(st.integers(1, 200), st.integers(0, 200)).map(
        lambda t: f"{{dist: uniform, low: {t[0]}, high: {sum(t)}}}"
    ),
    pair("{{dist: normal, mean: {}, std: {}, min: 1}}", st.integers(5, 300), st.integers(0, 60)),
    pair("{{dist: lognormal, mean: {}, std: {}, max: 3000}}", st.integers(5, 300), st.integers(1, 200)),
)
# Values a deployment could have, from which a scenario of a10_qwen7b.yaml's is usually accepted: each key's
# whole mapping where its keys depend on each other (an arrival process and its rate, a distribution and its
# parameters).
VALID: dict[str, st.SearchStrategy[str]] = {
    "dtype": st.sampled_from(["bfloat16", "float16"]),
    "hardware.tensor_parallel_size": st.sampled_from(["1", "2", "4"]),
    "hardware.replicas": st.integers(1, 3).map(str),
    "hardware.router": st.sampled_from(["round_robin", "least_outstanding"]),
    "hardware.gpu": st.sampled_from(["a10", "l40s", "a100-80gb", "h100-sxm"]),
    "engine.scheduler": st.sampled_from(["continuous", "static"]),
    "engine.kv_cache": st.sampled_from(["paged", "contiguous"]),
    "engine.block_size": st.sampled_from(["8", "16", "32"]),
    "engine.gpu_memory_utilization": fmt(0.6, 0.95),
    "engine.max_num_seqs": st.integers(1, 256).map(str),
    "engine.max_num_batched_tokens": st.integers(4096, 16384).map(str),
    "engine.max_model_len": st.integers(512, 4096).map(str),
    "engine.enable_chunked_prefill": st.sampled_from(["true", "false"]),
    "engine.enable_prefix_caching": st.sampled_from(["true", "false"]),
    "engine.kv_cache_dtype": st.sampled_from(["auto", "fp8"]),
    "workload.seed": st.integers(0, 2**32).map(str),
    "workload.too_long": st.sampled_from(["reject", "truncate"]),
    "workload.arrival": st.one_of(
        fmt(0.5, 50).map(lambda r: f"{{process: poisson, rate: {r}}}"),
        pair("{{process: gamma, rate: {}, burstiness: {}}}", fmt(0.5, 50), fmt(0.2, 5)),
        fmt(0.5, 50).map(lambda r: f"{{process: constant, rate: {r}}}"),
        pair("{{process: closed, concurrency: {}, think_time_s: {}}}", st.integers(1, 32), fmt(0, 2)),
    ),
    "workload.prompt_tokens": LENGTHS,
    "workload.output_tokens": LENGTHS,
    "workload.shared_prefix": pair("{{tokens: {}, group_size: {}}}", st.integers(1, 200), st.integers(1, 8)),
    "slo.ttft_ms.p99": fmt(1, 1e5),
    "slo.tpot_ms.mean": fmt(1, 1e4),
    "slo.e2el_ms.p99.9": fmt(1, 1e6),
}
# Each override valid (three times in four) or drawn from SCHEMA (hostile and plausible values alike): (key,
# value, hostile).
OVERRIDE = st.one_of(
    *[st.sampled_from(sorted(VALID)).flatmap(lambda key: VALID[key].map(lambda value: (key, value, False)))] * 3,
    st.sampled_from(sorted(SCHEMA)).flatmap(lambda key: SCHEMA[key].map(lambda value: (key, value, True))),
)
OVERRIDES = st.lists(OVERRIDE, min_size=1, max_size=3, unique_by=lambda o: o[0])
# Of a test's cases, at least this share accepted: below it the figures' checks run too seldom to mean much. CI's
# derandomized cases accept 19 of 60 (validate), 16 of 25 (simulate), 15 of 40 (trace files) and 22 of 40
# (compare); drawn from hostile values alone they accepted 5, 4, 0 and 0.
MIN_ACCEPTED = 0.25
KEY_WORDS = re.compile(r"\b(model|hardware|engine|workload|slo|dtype|name)\b|--set|cannot run")


def assert_names_a_key(err: str, overrides: list[tuple[str, str]], source: str) -> None:
    line = one_error_line(err)
    leaves = {key.split(".")[-1] for key, _ in overrides}
    assert source in line or "--set" in line, line
    assert any(leaf in line for leaf in leaves) or KEY_WORDS.search(line), line


# --- the properties -----------------------------------------------------------------------------------------


class Tally:
    """How many of a test's cases were accepted: checked against MIN_ACCEPTED once every case has run."""

    def __init__(self) -> None:
        self.accepted = self.total = 0

    def count(self, code: int) -> None:
        self.total += 1
        self.accepted += code == 0

    def check(self, what: str) -> None:
        assert self.total > 0
        share = self.accepted / self.total
        assert share >= MIN_ACCEPTED, f"{what}: {self.accepted} of {self.total} cases accepted"


def set_args(overrides) -> list[str]:
    return [a for key, value, _ in overrides for a in ("--set", f"{key}={value}")]


def names_the_broken_key(line: str, overrides, argv: list[str]) -> None:
    """A refusal whose valid values alone are accepted names a hostile key: its dotted path, or, for a mapping
    whose keys are checked together, its parent's (workload.arrival, workload.prompt_tokens)."""
    hostile = [key for key, _, is_hostile in overrides if is_hostile]
    if not hostile or run([*argv, *set_args([o for o in overrides if not o[2]])])[0] != 0:
        return
    named = [key for key in hostile if key in line or key.rsplit(".", 1)[0] + ":" in line]
    assert named or "cannot run" in line, (line, hostile)  # a deployment that cannot run names its sizes


# workload.num_requests, valid three times in four
NUM_REQUESTS = st.one_of(
    *[st.integers(1, 50).map(lambda n: ("workload.num_requests", str(n), False))] * 3,
    HOSTILE_VALUES.map(lambda value: ("workload.num_requests", value, True)),
)


@fuzz_settings(60)
@given(overrides=OVERRIDES, num_requests=NUM_REQUESTS)
def _validate_case(tally, overrides, num_requests):
    overrides = [*overrides, num_requests]
    code, _, err = run(["validate", str(A10), *set_args(overrides)])
    tally.count(code)
    if code == 2:
        assert_names_a_key(err, [o[:2] for o in overrides], str(A10))
        names_the_broken_key(one_error_line(err), overrides, ["validate", str(A10)])


def test_validate_any_scenario_values():
    tally = Tally()
    _validate_case(tally)
    tally.check("validate")


@fuzz_settings(25)
@given(overrides=OVERRIDES, num_requests=st.integers(1, 30))
def _simulate_case(tally, overrides, num_requests):
    scenario = [str(A10), "--set", f"workload.num_requests={num_requests}"]
    code, out, err = run(["simulate", *scenario, "--json", *set_args(overrides)])
    tally.count(code)
    if code == 2:
        assert_names_a_key(err, [o[:2] for o in overrides], str(A10))
        names_the_broken_key(one_error_line(err), overrides, ["validate", *scenario])
    else:
        check_summary(json.loads(out, parse_constant=_refuse_constant), num_requests)


def test_simulate_any_scenario_values():
    tally = Tally()
    _simulate_case(tally)
    tally.check("simulate")


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
def valid_trace(draw, jsonl: bool) -> tuple[str, bytes]:
    """12 to 20 requests a trace could hold: rising times, prompt and reply lengths a 4,096-token model takes."""
    rows = draw(st.integers(12, 20))
    gaps = draw(st.lists(st.floats(0, 5), min_size=rows, max_size=rows))
    times = [round(sum(gaps[: i + 1]), 6) for i in range(rows)]
    prompts = draw(st.lists(st.integers(1, 3000), min_size=rows, max_size=rows))
    outputs = draw(st.lists(st.integers(1, 300), min_size=rows, max_size=rows))
    if jsonl:
        records = [json.dumps({"t": t, "p": p, "o": o}) for t, p, o in zip(times, prompts, outputs)]
        return "t.jsonl", "\n".join(records).encode()
    return "t.csv", "\n".join(["t,p,o", *(f"{t},{p},{o}" for t, p, o in zip(times, prompts, outputs))]).encode()


@st.composite
def trace_files(draw) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["csv", "jsonl", "binary", "valid", "valid"]))
    if kind == "valid":
        return draw(valid_trace(draw(st.booleans())))
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
def _trace_case(tally, trace):
    name, content = trace
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / name).write_bytes(content)
        scenario = Path(tmp) / "s.yaml"
        scenario.write_text(TRACE_SCENARIO % name)
        code, out, err = run(["simulate", str(scenario), "--json"])
        tally.count(code)
        if code == 2:
            line = one_error_line(err)
            assert name in line or "workload.trace" in line, line
        else:
            check_summary(json.loads(out, parse_constant=_refuse_constant), 12)


def test_simulate_any_trace_file():
    tally = Tally()
    _trace_case(tally)
    tally.check("trace files")


METRIC_VALUES = st.one_of(st.floats(), st.integers(-(2**70), 2**70), JSON_VALUES)


@functools.cache
def real_summary() -> dict:
    """A real run's summary.json (a short simulation): what compare is usually handed."""
    code, out, _ = run(["simulate", str(A10), "--json", "--set", "workload.num_requests=8"])
    assert code == 0
    return json.loads(out)


@st.composite
def summary_files(draw, kind: str | None = None) -> bytes:
    kind = kind or draw(st.sampled_from(["metrics", "json", "binary", "utf16", "text", "real"]))
    if kind == "real":  # a real summary, some of its figures replaced by other finite numbers
        data = copy.deepcopy(real_summary())
        for key in draw(st.lists(st.sampled_from(["request_throughput", "p99_ttft_ms", "mean_itl_ms"]), max_size=2)):
            data[key] = draw(st.floats(0, 1e6))
        return json.dumps(data).encode()
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


# Half the pairs are two real summaries (figures changed or not), half any two files.
PAIRS = st.one_of(st.tuples(summary_files("real"), summary_files("real")), st.tuples(summary_files(), summary_files()))


@fuzz_settings(40)
@given(pair=PAIRS, as_json=st.booleans())
def _compare_case(tally, pair, as_json):
    a, b = pair
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "a.json", Path(tmp) / "b.json"]
        paths[0].write_bytes(a)
        paths[1].write_bytes(b)
        code, out, err = run(["compare", *map(str, paths), *(["--json"] if as_json else [])])
        tally.count(code)
        if code == 2:
            line = one_error_line(err)
            assert str(paths[0]) in line or str(paths[1]) in line, line
        elif as_json:
            assert json.loads(out)["rows"], out
        else:
            assert len(out.strip().splitlines()) >= 2, out


def test_compare_any_summary_files():
    tally = Tally()
    _compare_case(tally)
    tally.check("compare")
