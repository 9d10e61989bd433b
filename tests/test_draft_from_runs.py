"""`planner calibrate --from` a speculative run's folder: `planner run --out` writes each drafting step's timed
drafting (drafting.csv, keyed by its row in steps.csv), the target's terms are fitted to the steps without it and
the drafting terms to it (planner/calibration/draft_fit.py), as `--device` fits them; a bad or missing drafting.csv
is refused naming the file, the row, the column and what is allowed."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
from helpers import needs_torch

from planner.calibration.draft_fit import DRAFTING, predict_drafting, without_drafting
from planner.calibration.fitting import fit_steps, measured_scenario, predict_rows
from planner.calibration.profile_loader import load_profile
from planner.calibration.run_folder import read_drafting, read_run
from planner.calibration.wake import woken_steps
from planner.cli import main
from sim.cost_coefficients import CostCoefficients
from sim.draft_cost import DRAFT_COLUMNS, DRAFT_STEP
from sim.engine_facts import EngineFacts

EAGLE = "scenarios/cpu_tiny_eagle.yaml"


@pytest.fixture(scope="module")
def eagle_run(tmp_path_factory):
    """A live CPU run of the draft head's scenario, with its --out folder."""
    import torch

    folder = tmp_path_factory.mktemp("eagle-run")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["run", EAGLE, "--device", "cpu", "--set", "workload.num_requests=16", "--out", str(folder)]) == 0
    finally:
        torch.set_num_threads(threads)
    return folder


def _csv(path):
    return np.genfromtxt(path, delimiter=",", names=True)


@needs_torch
def test_run_out_keys_each_drafting_step_by_its_row_in_steps_csv(eagle_run):
    steps, drafts = _csv(eagle_run / "steps.csv"), _csv(eagle_run / "drafting.csv")
    assert drafts.dtype.names == (DRAFT_STEP, *DRAFT_COLUMNS)
    keyed = drafts[DRAFT_STEP].astype(int)
    # the steps that drafted are the steps that verify drafts (a row of 1 + k tokens), each once
    verifying = np.flatnonzero(steps["num_tokens"] > steps["num_prefill_tokens"] + steps["num_decode_requests"])
    assert len(keyed) >= 20 and keyed.tolist() == verifying.tolist()
    assert np.all(drafts["draft_s"] > 0) and np.all(drafts["draft_s"] < steps["device_s"][keyed])
    # a run that does not speculate writes none, and takes away a drafting.csv an earlier run left there
    argv = ["run", EAGLE, "--device", "cpu", "--set", "workload.num_requests=2", "--set", "engine.speculative=null"]
    plain = eagle_run.parent / "plain"
    shutil.copytree(eagle_run, plain)
    assert main([*argv, "--out", str(plain)]) == 0
    assert not (plain / "drafting.csv").exists()


@needs_torch
def test_calibrate_from_fits_the_target_on_verifying_and_drafting_on_drafting(eagle_run, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "eagle.yaml"
    assert main(["calibrate", "--from", str(eagle_run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "draft_pass_overhead_s" in printed and "drafting steps: median |error|" in printed
    profile = load_profile(out)
    drafts = _csv(eagle_run / "drafting.csv")
    assert profile.source == "live-runs" and profile.fit["by_class"][DRAFTING]["rows"] == len(drafts)
    assert profile.engine["speculative"]["method"] == "eagle"
    term = profile.coefficients["draft_pass_overhead_s"]
    assert term >= 0 and "draft_pass_overhead_s" in profile.uncertainty
    # the target's terms are those of the steps without their drafting, not of the steps as they were
    _, scenario, rows = read_run(eagle_run)
    warm = ~woken_steps(rows)  # the first steps after idle spells are priced apart (planner/calibration/wake.py)
    verify_rows = without_drafting(rows, read_drafting(eagle_run, rows))
    verifying = fit_steps(scenario, {k: v[warm] for k, v in verify_rows.items()}, robust=True, mean_unbiased=True)
    whole = fit_steps(scenario, {k: v[warm] for k, v in rows.items()}, robust=True, mean_unbiased=True)
    for name in verifying.result.names:
        assert profile.coefficients[name] == pytest.approx(getattr(verifying.coefficients, name), rel=1e-6), name
    assert whole.coefficients != verifying.coefficients
    # and `planner simulate --calibration` prices the scenario's drafting with the term
    capsys.readouterr()
    assert main(["simulate", EAGLE, "--calibration", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cost_model_provenance"]["profile_id"] == profile.id
    assert summary["cost_model"]["draft_pass_overhead_s"] == term


@needs_torch
def test_calibrate_from_recovers_known_terms_from_a_synthetic_speculative_folder(eagle_run, tmp_path):
    """The live folder's step shapes with their seconds priced from known terms: the verifying forward and the host
    from the target's, the drafting (in device_s too, and in drafting.csv) from the drafting term."""
    folder = tmp_path / "synthetic"
    shutil.copytree(eagle_run, folder)
    _, scenario, rows = read_run(folder)
    drafts = read_drafting(folder, rows)
    # target terms near the fit's start: --from's robust fit stops short of terms far from it even on exact steps
    terms = {
        "flops_efficiency": 0.5, "bandwidth_efficiency": 0.6, "launch_overhead_per_layer_s": 1e-5,
        "per_row_layer_overhead_s": 2e-6, "step_overhead_s": 3e-5, "per_row_overhead_s": 1e-5,
        "draft_pass_overhead_s": 4e-4,
    }  # fmt: skip
    truth = CostCoefficients(**terms)
    facts = EngineFacts.of(measured_scenario(scenario))
    device = predict_rows(facts, dataclasses.replace(truth, step_overhead_s=0.0, per_row_overhead_s=0.0), rows, True)
    host = predict_rows(facts, truth, rows, serial=True) - device
    draft_s = predict_drafting(facts, truth, drafts)
    device[drafts[DRAFT_STEP]] += draft_s
    steps = _csv(folder / "steps.csv")
    steps["host_s"], steps["device_s"], steps["duration_s"] = host, device, host + device
    steps["start_s"] = np.concatenate([[0.0], np.cumsum(host + device)[:-1]])  # back to back: no idle spell
    fmt = ["%.9g" if n.endswith("_s") else "%d" for n in steps.dtype.names]
    np.savetxt(
        folder / "steps.csv", steps.tolist(), fmt=fmt, delimiter=",", header=",".join(steps.dtype.names), comments=""
    )
    table = _csv(folder / "drafting.csv")
    table["draft_s"] = draft_s
    fmt = ["%.9g" if n in ("draft_s", "later_context_tokens") else "%d" for n in table.dtype.names]
    np.savetxt(
        folder / "drafting.csv", table.tolist(), fmt=fmt, delimiter=",", header=",".join(table.dtype.names), comments=""
    )
    out = tmp_path / "synthetic.yaml"
    assert main(["calibrate", "--from", str(folder), "--out", str(out)]) == 0
    profile = load_profile(out)
    for name, value in terms.items():
        assert profile.coefficients[name] == pytest.approx(value, rel=0.01), name
    assert profile.fit["by_class"][DRAFTING]["median"] < 0.01
    assert profile.fit["median_abs_error"] < 0.01  # the verifying steps, priced without their drafting


def _refused(capsys, folders, tmp_path) -> str:
    capsys.readouterr()
    argv = ["calibrate", "--from", *map(str, folders), "--out", str(tmp_path / "p.yaml")]
    assert main(argv) == 2
    assert not (tmp_path / "p.yaml").exists()
    return capsys.readouterr().err


def _cell(column: int, value: str):
    """An edit of drafting.csv's lines: its first row's cell in `column` set to `value`."""

    def edit(lines):
        cells = lines[1].split(",")
        cells[column] = value
        return [lines[0], ",".join(cells), *lines[2:]]

    return edit


@needs_torch
@pytest.mark.parametrize(
    "edit, words",
    [
        (None, "without drafting.csv"),
        (lambda lines: [lines[0], *lines[2:], lines[1]], "must be greater than the row before's"),
        (_cell(0, "99999"), "row 1, step = 99999: must be a row of steps.csv"),
        (_cell(0, "1.5"), "row 1, step = 1.5: must be a row of steps.csv"),
        (_cell(1, "50"), "row 1, draft_s = 50: must be seconds > 0 and at least 1e-06 s below its step's device_s"),
        (_cell(1, "0"), "row 1, draft_s = 0: must be seconds > 0"),
        (_cell(2, "-1"), "row 1, num_rows = -1: must be a number of tokens or rows"),
        (lambda lines: [lines[0].replace("num_rows", "rows"), *lines[1:]], "no rows with the columns num_rows"),
    ],
    ids=["missing", "out-of-order", "no-such-step", "fractional-step", "more-than-its-step", "zero", "negative",
         "no-column"],
)  # fmt: skip
def test_a_bad_drafting_csv_is_refused_naming_it(eagle_run, tmp_path, capsys, edit, words):
    folder = tmp_path / "r"
    shutil.copytree(eagle_run, folder)
    path = folder / "drafting.csv"
    if edit is None:
        path.unlink()
    else:
        path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
    err = _refused(capsys, [folder], tmp_path)
    assert words in err and str(folder / ("" if edit is None else "drafting.csv")) in err


@needs_torch
def test_runs_of_another_drafter_or_none_are_not_pooled(eagle_run, tmp_path, capsys):
    plain = tmp_path / "plain"
    argv = ["run", EAGLE, "--device", "cpu", "--set", "workload.num_requests=2", "--set", "engine.speculative=null"]
    assert main([*argv, "--out", str(plain)]) == 0
    err = _refused(capsys, [eagle_run, plain], tmp_path)
    assert f"{plain}: drafts with no drafter" in err and "eagle tiny-eagle-head, k = 3" in err


@needs_torch
def test_an_eagle3_run_folder_is_fitted_like_an_eagle_one(tmp_path, capsys):
    """The EAGLE-3 head (its LM head over its draft vocabulary) drafts live, so its folder's drafting is fitted."""
    import torch

    folder = tmp_path / "eagle3"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        argv = ["run", "scenarios/cpu_tiny_eagle3.yaml", "--device", "cpu", "--set", "workload.num_requests=16"]
        assert main([*argv, "--out", str(folder)]) == 0
    finally:
        torch.set_num_threads(threads)
    out = tmp_path / "eagle3.yaml"
    assert main(["calibrate", "--from", str(folder), "--out", str(out)]) == 0
    profile = load_profile(out)
    assert profile.engine["speculative"]["method"] == "eagle3"
    assert profile.engine["speculative"]["model"]["draft_vocab_size"] == 128
    assert profile.fit["by_class"][DRAFTING]["rows"] == len(_csv(folder / "drafting.csv")) >= 20
    assert profile.coefficients["draft_pass_overhead_s"] >= 0
