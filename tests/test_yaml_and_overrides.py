"""Scenario YAML and --set as a fuzzing round found them: YAML 1.1 leftovers read as plain strings, values the
reader would crash on or print raw refused in one line, percentile keys kept whole, and overrides that would
drop what the user asked for refused; calibration profiles with a date out of range or a key given twice."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.scenario_files import MINIMAL, load_error, write

from planner.calibration.profile import ProfileError
from planner.calibration.profile_loader import load_profile
from planner.scenario.load import load_scenario


@pytest.mark.parametrize("name", ["2026-02-30", "2026-01-01", "2026-01-01T25:00:00", "=", "<<"])
def test_yaml_1_1_timestamps_merge_and_value_keys_are_plain_strings(tmp_path, name):
    # 2026-02-30 crashed the reader (a date out of range), a valid date was a date, `=` had no constructor.
    scenario = load_scenario(write(tmp_path, MINIMAL + f"name: {name}\n".replace(": <<", ': "<<"')))
    assert scenario.name == name
    assert load_scenario(write(tmp_path, MINIMAL), (f"name={name}",)).name == name


def test_an_explicit_tag_out_of_range_is_one_line(tmp_path):
    path = write(tmp_path, MINIMAL + "name: !!timestamp 2026-02-30\n")
    assert load_error(path) == f"{path}: invalid YAML: day is out of range for month"


@pytest.mark.parametrize(("escaped", "code"), [("a\\x1bb", "001B"), ("a\\u0000b", "0000"), ("l1\\nSLO ok", "000A")])
def test_a_string_with_a_control_character_is_refused(tmp_path, escaped, code):
    # Printed raw they sent escape sequences to the terminal, or a newline that faked an output line.
    path = write(tmp_path, MINIMAL + f'name: "{escaped}"\n')
    assert f"holds control character U+{code}; strings are one line of printable text" in load_error(path)
    assert load_scenario(write(tmp_path, MINIMAL + 'name: "a\\tb"\n')).name == "a\tb"  # a tab is text


def test_set_keeps_a_percentile_keys_decimals(tmp_path):
    slo = load_scenario(write(tmp_path, MINIMAL), ("slo.ttft_ms.p99.9=5",)).slo
    assert slo.ttft_ms == {"p99.9": 5.0}


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (("engine.max_num_seqs=5", "engine.max_num_seqs=7"), "--set engine.max_num_seqs=7: sets it again, given"),
        (
            ("workload.arrival.rate=5", "workload.arrival={process: closed, concurrency: 2}"),
            "replaces the mapping holding workload.arrival.rate, given before by --set workload.arrival.rate=5",
        ),
    ],
)
def test_set_refuses_to_drop_a_key_it_was_given(tmp_path, overrides, words):
    assert words in load_error(write(tmp_path, MINIMAL), overrides)


def test_set_puts_a_key_into_the_mapping_set_before_it(tmp_path):
    overrides = ("workload.arrival={process: poisson}", "workload.arrival.rate=5")
    assert load_scenario(write(tmp_path, MINIMAL), overrides).workload.arrival.rate == 5.0


SHIPPED_PROFILE = Path(__file__).resolve().parent.parent / "planner" / "calibrations" / "a100-80gb-tp1.yaml"


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda text: re.sub(r"(?m)^created: .*$", "created: 2026-02-30", text), "day is out of range for month"),
        (lambda text: text + "format: planner-calibration/1\n", "found duplicate key 'format'"),
        (  # a hand edit as a scenario takes it: YAML 1.1 reads it as text
            lambda text: re.sub(r"(?m)^  kernel_floor_per_layer_s: .*$", "  kernel_floor_per_layer_s: 4e-05", text),
            "expected a finite number .*: write 4.0e-05",
        ),
    ],
)
def test_a_profile_with_a_date_out_of_range_or_a_key_twice_is_refused(tmp_path, edit, words):
    # The date crashed the loader; the second key silently won over the first.
    path = tmp_path / "p.yaml"
    path.write_text(edit(SHIPPED_PROFILE.read_text()))
    with pytest.raises(ProfileError, match=f"{re.escape(str(path))}: calibration profile: .*{words}"):
        load_profile(path)


def test_a_profiles_merge_key_still_merges_and_may_be_overridden():
    # YAML 1.1's `<<: *base` is no key given twice, even where an explicit key overrides a merged one.
    from planner.scenario.yaml_loader import parse_yaml11_unique_keys

    text = "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n"
    assert parse_yaml11_unique_keys(text)["c"] == {"x": 1, "y": 3}


@pytest.mark.parametrize("key", ["p00099", "p05"])
def test_a_percentile_with_a_leading_zero_is_refused(tmp_path, key):
    # p00099 was read as p99 under its own spelling: one percentile, one key.
    assert f"slo.ttft_ms.{key}: unknown statistic" in load_error(write(tmp_path, MINIMAL), (f"slo.ttft_ms.{key}=5",))
