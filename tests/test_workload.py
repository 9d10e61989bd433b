import csv
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import ArrivalConfig, Distribution, SharedPrefixConfig, TraceConfig, WorkloadConfig
from sim.errors import WorkloadError
from sim.trace_file import read_trace
from sim.workload import generate_workload, prompt_token_ids

TRACES = Path(__file__).resolve().parents[1] / "scenarios" / "traces"
CONV = TRACES / "azure_conv_2023.csv"
BIG = 1_000_000  # a max_model_len nothing exceeds


def poisson(rate: float = 10.0) -> ArrivalConfig:
    return ArrivalConfig("poisson", rate=rate)


def lognormal(mean: float, std: float) -> Distribution:
    return Distribution("lognormal", mean=mean, std=std)


def config(**kw) -> WorkloadConfig:
    base = WorkloadConfig(
        num_requests=1000,
        seed=1,
        arrival=poisson(),
        prompt_tokens=lognormal(500, 300),
        output_tokens=Distribution("uniform", low=10, high=200),
    )
    return replace(base, **kw)


def trace_config(n: int, **kw) -> WorkloadConfig:
    return config(
        num_requests=n,
        arrival=ArrivalConfig("trace", rate=kw.pop("rate", None)),
        prompt_tokens=Distribution("trace"),
        output_tokens=Distribution("trace"),
        trace=TraceConfig(str(kw.pop("path", CONV)), **kw),
    )


def csv_rows(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    arrived = np.array([float(r["arrived_at"]) for r in rows])
    prompt = np.array([int(r["num_prefill_tokens"]) for r in rows])
    output = np.array([int(r["num_decode_tokens"]) for r in rows])
    return arrived, prompt, output


def same(a, b) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("arrival_s", "prompt_tokens", "output_tokens", "prefix_group", "prefix_tokens")
    )


def test_same_seed_same_workload_other_seed_differs():
    cfg = config(shared_prefix=SharedPrefixConfig(tokens=64, group_size=4))
    assert same(generate_workload(cfg, BIG), generate_workload(cfg, BIG))
    other = generate_workload(replace(cfg, seed=2), BIG)
    assert not np.array_equal(other.arrival_s, generate_workload(cfg, BIG).arrival_s)
    assert not np.array_equal(other.prompt_tokens, generate_workload(cfg, BIG).prompt_tokens)


def test_streams_are_independent():
    base = generate_workload(config(), BIG)
    new_output = generate_workload(config(output_tokens=Distribution("normal", mean=300, std=50)), BIG)
    assert np.array_equal(base.arrival_s, new_output.arrival_s)
    assert np.array_equal(base.prompt_tokens, new_output.prompt_tokens)
    assert not np.array_equal(base.output_tokens, new_output.output_tokens)
    new_arrival = generate_workload(config(arrival=ArrivalConfig("gamma", rate=3.0, burstiness=0.5)), BIG)
    assert np.array_equal(base.prompt_tokens, new_arrival.prompt_tokens)
    assert np.array_equal(base.output_tokens, new_arrival.output_tokens)


@pytest.mark.parametrize("arrival", [poisson(7.0), ArrivalConfig("gamma", rate=7.0, burstiness=0.3)])
def test_poisson_and_gamma_mean_rate(arrival):
    n = 20_000
    arrival_s = generate_workload(config(num_requests=n, arrival=arrival), BIG).arrival_s
    assert np.all(np.diff(arrival_s) >= 0) and arrival_s[0] > 0  # vLLM: the first after one gap
    assert n / arrival_s[-1] == pytest.approx(7.0, rel=1e-9)  # vLLM's rescale: the last lands at n/rate
    half = n // 2  # the rescale is a small correction, not what sets the rate
    assert half / arrival_s[half - 1] == pytest.approx(7.0, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_burstiness_sets_the_cv_of_gaps(burstiness):
    cfg = config(num_requests=20_000, arrival=ArrivalConfig("gamma", rate=5.0, burstiness=burstiness))
    gaps = np.diff(generate_workload(cfg, BIG).arrival_s, prepend=0.0)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.08)


def test_constant_spacing_starts_at_zero():
    arrival_s = generate_workload(config(num_requests=50, arrival=ArrivalConfig("constant", rate=4.0)), BIG).arrival_s
    np.testing.assert_allclose(arrival_s, np.arange(50) * 0.25)


def test_closed_loop_has_no_arrival_times():
    arrival = ArrivalConfig("closed", concurrency=8, think_time_s=0.5)
    wl = generate_workload(config(arrival=arrival), BIG)
    assert wl.arrival_s is None and wl.concurrency == 8 and wl.think_time_s == 0.5 and len(wl) == 1000


def test_closed_loop_users_start_spread_over_one_think_time():
    # Started at once, alike users stayed in step (every prefill together) and a short run's percentiles bore
    # the burst: each user's first request comes at user x think / users instead (0 without think time).
    wl = generate_workload(config(arrival=ArrivalConfig("closed", concurrency=8, think_time_s=0.5)), BIG)
    assert [wl.user_start_s(u) for u in range(8)] == [0.5 * u / 8 for u in range(8)]
    wl = generate_workload(config(arrival=ArrivalConfig("closed", concurrency=8, think_time_s=0.0)), BIG)
    assert {wl.user_start_s(u) for u in range(8)} == {0.0}


def test_both_modes_send_a_closed_loops_first_requests_at_the_users_starts():
    from helpers.scenarios import make_scenario

    from gpu_engine.engine import Arrivals
    from sim.driver import simulate

    closed = {"num_requests": 40, "arrival": {"process": "closed", "concurrency": 4, "think_time_s": 0.2}}
    scenario = make_scenario(workload=closed)
    first = sorted(simulate(scenario).recorder.requests.view()["arrival_s"])[:4]  # a user's next comes >= 0.2 s on
    starts = [0.2 * user / 4 for user in range(4)]
    assert first == starts
    wl = generate_workload(scenario.workload, scenario.max_model_len)
    assert Arrivals(wl).pop_due(1.0) == [(start, user) for user, start in enumerate(starts)]


def test_trace_replay_matches_file_rows_and_wraps_around():
    arrived, prompt, output = csv_rows(CONV)
    rows = len(prompt)
    wl = generate_workload(trace_config(rows + 3), BIG)
    np.testing.assert_array_equal(wl.prompt_tokens, np.concatenate([prompt, prompt[:3]]))
    np.testing.assert_array_equal(wl.output_tokens, np.concatenate([output, output[:3]]))
    start = arrived - arrived[0]
    period = start[-1] * rows / (rows - 1)
    np.testing.assert_allclose(wl.arrival_s, np.concatenate([start, start[:3] + period]))


def test_trace_rescaled_to_target_rate():
    wl = generate_workload(trace_config(2000, rate=20.0), BIG)
    _, prompt, _ = csv_rows(CONV)
    assert wl.arrival_s[0] == 0 and (len(wl) - 1) / wl.arrival_s[-1] == pytest.approx(20.0)
    np.testing.assert_array_equal(wl.prompt_tokens, prompt[:2000])


@pytest.mark.parametrize("times", [[5.0], [5.0, 5.0, 5.0]])
def test_a_rate_for_a_trace_without_gaps_is_an_error_not_ignored(tmp_path, times):
    """One row, or one time in every row: no gap to scale, and the rate was silently dropped (a burst at 0)."""
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(f"{t},10,10\n" for t in times))
    with pytest.raises(WorkloadError, match=f"rate = 2: every arrival of trace file {path} is at the same time"):
        generate_workload(trace_config(20, rate=2.0, path=path), BIG)
    assert not generate_workload(trace_config(20, path=path), BIG).arrival_s.any()  # no rate: one burst
    assert len(generate_workload(trace_config(1, rate=2.0, path=path), BIG)) == 1  # one request: no gap needed


def test_trace_rows_sampled_at_random():
    cfg = trace_config(500, row_order="sample")
    wl = generate_workload(replace(cfg, arrival=poisson()), BIG)
    _, prompt, output = csv_rows(CONV)
    pairs = set(zip(prompt.tolist(), output.tolist()))
    assert all(p in pairs for p in zip(wl.prompt_tokens.tolist(), wl.output_tokens.tolist()))  # rows kept whole
    assert not np.array_equal(wl.prompt_tokens, prompt[:500])
    assert same(wl, generate_workload(replace(cfg, arrival=poisson()), BIG))


def test_jsonl_with_own_column_names_matches_csv(tmp_path):
    arrived, prompt, output = csv_rows(CONV)
    path = tmp_path / "t.jsonl"
    rows = zip(arrived.tolist(), prompt.tolist(), output.tolist())
    path.write_text("".join(json.dumps({"t": a, "in": p, "out": o}) + "\n" for a, p, o in rows))
    from_csv = generate_workload(trace_config(300), BIG)
    cols = {"prompt_column": "in", "output_column": "out", "arrival_column": "t"}
    assert same(from_csv, generate_workload(trace_config(300, path=path, **cols), BIG))


@pytest.mark.parametrize(
    "content",
    [
        "t,p,o\n0,10,1\n\n1,2e1,1",  # plain: a blank line, no final newline
        "t,p,o\r\n0,10,1\r\n\r\n1,20,1\r\n",  # CRLF
        '"t","p","o"\n"0","10","1"\n1,"20",1\n',  # quoted names and values
        "t , p ,o\n0, 10 ,1\n , , \n1,\t20,1\n",  # spaces around names and values; a row of blanks
        "t,p,o,note\n0,1_0,1,a\n1,+20.0,1\n",  # float()'s spellings; a row without the unused column
    ],
)
def test_trace_csv_values_read_as_the_csv_module_and_float_read_them(tmp_path, content):
    path = tmp_path / "t.csv"
    path.write_bytes(content.encode())
    table = read_trace(path, ["t", "p", "o"], "t")
    assert [table[c].tolist() for c in "tpo"] == [[0, 1], [10, 20], [1, 1]]


def csv_and_float(text: str, columns: list[str]) -> list[list[float]]:
    """What read_trace promises of a CSV: the csv module's rows, blank ones skipped, each value float() of its
    text; a missing or bad value raises (ValueError, IndexError)."""
    rows = [row for row in csv.reader(io.StringIO(text, newline="")) if any(field.strip() for field in row)]
    header = [name.strip() for name in rows[0]]
    if any(len(row) > len(header) for row in rows[1:]):
        raise ValueError("a row of more fields than the header")
    return [[float(row[header.index(c)].strip()) for row in rows[1:]] for c in columns]


NUMBER = st.from_regex(r"[0-9]{1,6}(\.[0-9]{0,3})?([eE][-+]?[0-9]{1,2})?", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.lists(NUMBER | st.sampled_from(["", " 7", "-1", "1e999", '"5"', "1_0"]), min_size=2, max_size=4)),
    newlines=st.lists(st.sampled_from(["\n", "\n\n", "\r\n"]), min_size=1),
)
def test_trace_csv_values_are_what_csv_and_float_read(tmp_path_factory, rows, newlines):
    text = "".join(",".join(row) + newlines[i % len(newlines)] for i, row in enumerate([["t", "p"], *rows]))
    path = tmp_path_factory.mktemp("trace") / "t.csv"
    path.write_text(text, newline="")
    try:
        expected = csv_and_float(text, ["t", "p"])
        # token counts are whole numbers (10.7 tokens is refused, not rounded)
        in_range = all(abs(v) <= 1e10 for v in expected[0]) and all(
            0 <= v <= 1 << 24 and v == int(v) for v in expected[1]
        )
    except (ValueError, IndexError):
        expected, in_range = None, False
    if not in_range:
        with pytest.raises(WorkloadError, match=f"trace file {path}: line"):
            read_trace(path, ["t", "p"], "t")
    else:
        assert [read_trace(path, ["t", "p"], "t")[c].tolist() for c in "tp"] == expected


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("t.csv", "t,p,o,p\n0,10,1,9\n", "column 'p' appears 2 times in the header (columns 2, 4)"),
        ("t.csv", '"t","p","p","o"\n0,10,1,1\n', "column 'p' appears 2 times in the header (columns 2, 3)"),
        ("t.csv", "t,p,o\n0,10,1\n1,20,1,9\n", "line 3: 4 fields, the header names 3"),  # plain, read by numpy
        ("t.csv", "t,p,o\r\n0,10,1\r\n1,2,0,3\r\n", "line 3: 4 fields, the header names 3"),  # the csv module's
        ("t.jsonl", '{"t": 0, "p": 10, "o": 1}\n{"t": 1, "p": 5, "o": 1, "p": 7}\n', "line 2: key 'p' appears twice"),
    ],
)
def test_a_trace_that_gives_a_value_twice_or_an_extra_field_is_refused(tmp_path, name, content, message):
    # Reading one of two values silently (or a row whose unquoted comma shifted its fields) changes the workload.
    path = tmp_path / name
    path.write_bytes(content.encode())
    with pytest.raises(WorkloadError, match=f"trace file {path}: {re.escape(message)}"):
        read_trace(path, ["t", "p", "o"], "t")


def test_a_trace_is_read_once_until_it_changes(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("p\n1\n2\n")
    first = read_trace(path, ["p"])
    assert read_trace(path, ["p"])["p"] is first["p"] and not first["p"].flags.writeable  # shared, so read-only
    path.write_text("p\n3\n4\n5\n")
    assert read_trace(path, ["p"])["p"].tolist() == [3, 4, 5]


@pytest.mark.parametrize("name", ["azure_conv_2023.csv", "azure_code_2023.csv", "arxiv_summarization.csv"])
def test_shipped_traces_work_out_of_the_box(name):
    cfg = trace_config(20_000, path=TRACES / name)
    if name.startswith("arxiv"):  # lengths only: no arrival column
        cfg = replace(cfg, arrival=poisson())
    wl = generate_workload(cfg, 4096, vocab_size=32000)
    assert len(wl) + wl.num_rejected == 20_000 and len(wl) > 15_000
    assert np.all(wl.prompt_tokens + wl.output_tokens <= 4096)


def test_reject_drops_too_long_requests_and_keeps_the_others_times():
    cfg = config(prompt_tokens=Distribution("uniform", low=1, high=100), output_tokens=Distribution("fixed", value=20))
    full = generate_workload(cfg, BIG)
    wl = generate_workload(cfg, 100)
    fits = full.prompt_tokens <= 80
    assert wl.num_rejected == np.sum(~fits) > 0 and wl.num_truncated == 0
    np.testing.assert_array_equal(wl.prompt_tokens, full.prompt_tokens[fits])
    np.testing.assert_array_equal(wl.arrival_s, full.arrival_s[fits])


def test_truncate_cuts_the_prompt_and_keeps_the_output():
    cfg = config(prompt_tokens=Distribution("uniform", low=1, high=100), output_tokens=Distribution("fixed", value=20))
    full = generate_workload(cfg, BIG)
    wl = generate_workload(replace(cfg, too_long="truncate"), 100)
    assert wl.num_truncated == np.sum(full.prompt_tokens > 80) > 0 and wl.num_rejected == 0
    np.testing.assert_array_equal(wl.prompt_tokens, np.minimum(full.prompt_tokens, 80))
    assert np.all(wl.output_tokens == 20)


def test_truncate_an_output_longer_than_the_model():
    cfg = config(num_requests=3, output_tokens=Distribution("fixed", value=500), too_long="truncate")
    wl = generate_workload(cfg, 100)
    assert np.all(wl.output_tokens == 99) and np.all(wl.prompt_tokens == 1) and wl.num_truncated == 3


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    max_model_len=st.integers(2, 3000),
    too_long=st.sampled_from(["reject", "truncate"]),
)
def test_every_request_fits_and_every_request_is_counted(seed, max_model_len, too_long):
    cfg = config(num_requests=200, seed=seed, too_long=too_long, output_tokens=lognormal(300, 400))
    wl = generate_workload(cfg, max_model_len)
    assert np.all(wl.prompt_tokens + wl.output_tokens <= max_model_len)
    assert np.all(wl.prompt_tokens >= 1) and np.all(wl.output_tokens >= 1)
    assert len(wl) + wl.num_rejected == 200


def test_lognormal_lengths_have_the_asked_mean_and_std():
    prompt = generate_workload(config(num_requests=20_000, prompt_tokens=lognormal(800, 600)), BIG).prompt_tokens
    assert prompt.mean() == pytest.approx(800, rel=0.03)
    assert prompt.std() == pytest.approx(600, rel=0.1)


def test_lengths_clipped_to_min_and_max():
    dist = Distribution("normal", mean=100, std=80, min=20, max=150)
    prompt = generate_workload(config(prompt_tokens=dist), BIG).prompt_tokens
    assert prompt.min() == 20 and prompt.max() == 150


def test_shared_prefix_groups():
    cfg = config(
        num_requests=10,
        prompt_tokens=Distribution("uniform", low=1, high=100),
        shared_prefix=SharedPrefixConfig(tokens=50, group_size=4),
    )
    wl = generate_workload(cfg, BIG, vocab_size=1000)
    np.testing.assert_array_equal(wl.prefix_group, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(wl.prefix_tokens, np.minimum(wl.prompt_tokens, 50))
    ids = [prompt_token_ids(wl, i) for i in range(len(wl))]
    assert [len(x) for x in ids] == wl.prompt_tokens.tolist()
    for i in range(len(wl)):
        for j in range(len(wl)):
            common = min(wl.prefix_tokens[i], wl.prefix_tokens[j])
            if wl.prefix_group[i] == wl.prefix_group[j]:
                assert ids[i][:common] == ids[j][:common]
            elif common > 10:
                assert ids[i][:common] != ids[j][:common]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**63), index=st.integers(0, 49), vocab_size=st.integers(1, 200_000))
def test_token_ids_deterministic_and_in_vocab(seed, index, vocab_size):
    wl = generate_workload(config(num_requests=50, seed=3), BIG)
    ids = prompt_token_ids(wl, index, vocab_size, seed)
    assert ids == prompt_token_ids(wl, index, vocab_size, seed)
    assert len(ids) == wl.prompt_tokens[index] and 0 <= min(ids) and max(ids) < vocab_size


def test_arrays_are_read_only():
    wl = generate_workload(config(), BIG)
    with pytest.raises(ValueError):
        wl.prompt_tokens[0] = 1


def test_missing_trace_file_names_it(tmp_path):
    with pytest.raises(WorkloadError, match="nope.csv"):
        generate_workload(trace_config(10, path=tmp_path / "nope.csv"), BIG)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_missing_column_names_file_column_and_present_columns(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    path.write_text("a,num_decode_tokens\n1,2\n" if suffix == ".csv" else '{"a": 1, "num_decode_tokens": 2}\n')
    cfg = replace(trace_config(10, path=path), arrival=poisson())
    with pytest.raises(WorkloadError) as e:
        generate_workload(cfg, BIG)
    assert str(path) in str(e.value) and "'num_prefill_tokens'" in str(e.value)
    assert "a, num_decode_tokens" in str(e.value)


def test_arrival_column_only_needed_for_trace_arrivals():
    cfg = trace_config(10, path=TRACES / "arxiv_summarization.csv")
    with pytest.raises(WorkloadError, match="arrived_at"):
        generate_workload(cfg, BIG)
    assert len(generate_workload(replace(cfg, arrival=poisson()), BIG)) == 10
