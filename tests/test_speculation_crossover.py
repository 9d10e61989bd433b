"""Speculative decoding on and off against load in `planner size`'s report (planner/sizing/report/speculation.py):
the curves of every swept config on the recommended candidate's engine, the first load where one is worse than no
speculation marked, in the terminal, report.md, report.html, the figure and sizing.json."""

from __future__ import annotations

import json

import yaml
from helpers import ROOT

from planner.cli import main
from planner.sizing.speculation_curve import Curve, table_lines

SIZE_SPEC = ROOT / "scenarios" / "size_h100_llama31_8b_spec.yaml"


def test_a_crossover_is_the_first_load_where_a_config_is_worse():
    off = Curve("off", (1, 16, 256), (6.0, 7.0, 25.0), (160.0, 2000.0, 6000.0))
    on = Curve("ngram k=3", (1, 16, 256), (4.0, 7.5, 24.0), (250.0, 2100.0, 5500.0))
    assert on.crossovers(off) == {"TPOT": 16, "throughput": 256}
    assert off.crossovers(off) == {}
    lines = table_lines([off, on])
    assert lines[3] == "| 16 | 7.00, 2,000 | 7.50, 2,100 (TPOT worse) |"
    assert lines[4] == "| 256 | 25.00, 6,000 | 24.00, 5,500 (throughput worse) |"
    assert lines[-1] == "ngram k=3 is worse than no speculation in TPOT from 16 users, throughput from 256 users."


def _question(tmp_path, rates: list[float]):
    """The shipped speculation sizing file cut to a fast search: fixed short lengths, off and an EAGLE-3 head
    drafting 5 tokens accepted at `rates` (a poor acceptance makes the extra tokens waste at load)."""
    data = yaml.safe_load(SIZE_SPEC.read_text())
    head = data["search"]["candidates"]["engine"]["speculative"][3]
    data["search"]["candidates"]["engine"]["speculative"] = [None, head | {"synthetic_acceptance_rates": rates}]
    data["workload"] |= {
        "prompt_tokens": {"dist": "fixed", "value": 100},
        "output_tokens": {"dist": "fixed", "value": 40},
    }
    data["search"]["probe"] = {"num_requests": 60, "max_probes": 4}
    path = tmp_path / "size.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_size_reports_where_speculation_stops_paying(tmp_path, capsys):
    out = tmp_path / "report"
    path = _question(tmp_path, [0.3, 0.1, 0.05, 0.02, 0.01])
    assert main(["size", str(path), "--workers", "1", "--out", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    x = data["speculation_crossover"]
    assert x["candidate"] == "h100-sxm tp1" and x["users"] == [1, 4, 16, 64, 256, 1024]
    off, on = x["curves"]
    assert off["label"] == "off" and "worse_from_users" not in off and on["label"] == "eagle3 k=5"
    # one user: the drafts cost little beside the weights read; under load the rejected ones are waste
    assert on["mean_tpot_ms"][0] < off["mean_tpot_ms"][0]
    assert on["output_throughput"][-1] < off["output_throughput"][-1]
    assert on["worse_from_users"] == {"throughput": 16, "TPOT": 64}  # as docs/speculative-decoding.md says
    first = on["worse_from_users"]["throughput"]
    at = x["users"].index(first)
    assert all(a >= b for a, b in zip(on["output_throughput"][:at], off["output_throughput"][:at]))
    md = (out / "report.md").read_text()
    assert "## Speculative decoding on and off" in md and "eagle3 k=5 is worse than no speculation in" in md
    # the shipped H100 profile fits no drafting term: the report says the gain is an upper bound
    assert x["drafting_unfitted"] == ["eagle3"] and "read the speculative gain as an upper bound" in md
    assert f"throughput from {first} users" in md and "![Speculative decoding on and off" in md
    assert (out / "speculation_crossover.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4 and "<h2>Speculative decoding on and off</h2>" in page
    assert json.loads((out / "sizing.json").read_text())["speculation_crossover"] == x
    spec = next(c for c in data["candidates"] if c["label"].endswith("eagle3 k=5"))["settings"]["speculative"]
    assert spec["num_speculative_tokens"] == 5  # sizing.json writes a swept config's fields


def test_no_crossover_section_without_speculation_off_among_the_configs(tmp_path, capsys):
    data = yaml.safe_load(_question(tmp_path, [0.7, 0.5, 0.3, 0.2, 0.1]).read_text())
    data["search"]["candidates"]["engine"]["speculative"] = data["search"]["candidates"]["engine"]["speculative"][1:]
    (tmp_path / "on.yaml").write_text(yaml.safe_dump(data))
    assert main(["size", str(tmp_path / "on.yaml"), "--workers", "1"]) == 0
    assert "Speculative decoding on and off" not in capsys.readouterr().out
