"""A path no file system can take, given to any command as any path argument (or as a path inside a scenario),
is one line naming the argument and the reason, exit 2, before anything is opened (planner.paths, called for
every command from planner.cli). Before, the first open() that met it raised OSError ENAMETOOLONG."""

from __future__ import annotations

import pytest
from helpers import ROOT, error_of

SCENARIO = str(ROOT / "scenarios" / "cpu_tiny.yaml")
SIZING = str(ROOT / "scenarios" / "size_a10_qwen7b.yaml")


def hostile(kind: str, tmp_path) -> str:
    if kind == "name of 300 characters":  # over the 255 bytes a name may have
        return str(tmp_path / ("x" * 296 + ".yaml"))
    if kind == "path of 4,000 characters":  # one name, relative to the current folder
        return "y" * 4_000
    # 4,100 characters in names of 200: each name fits, the whole is over the 4,095 bytes a path may have
    return "/tmp/" + "/".join(["z" * 199] * 20) + "/" + "z" * 95


KINDS = ["name of 300 characters", "path of 4,000 characters", "deep path of 4,100 characters"]
# (command line with {} where the hostile path goes, the words the message must start with)
ARGUMENTS = [
    (["validate", "{}"], "the scenario file"),
    (["validate", SCENARIO, "{}"], "the scenario file"),
    (["memory", "{}"], "the scenario file"),
    (["simulate", "{}"], "the scenario file"),
    (["simulate", SCENARIO, "--out", "{}"], "--out"),
    (["simulate", SCENARIO, "--calibration", "{}"], "--calibration"),
    (["run", "{}", "--device", "cpu"], "the scenario file"),
    (["run", SCENARIO, "--device", "cpu", "--out", "{}"], "--out"),
    (["run", SCENARIO, "--device", "cpu", "--model-path", "{}"], "--model-path"),
    (["calibrate", "--device", "cpu", "{}"], "the scenario file"),
    (["calibrate", "--device", "cpu", "--out", "{}"], "--out"),
    (["calibrate", "--from", "{}"], "--from"),
    (["calibrate", "--from", str(ROOT), "{}"], "--from"),
    (["size", "{}"], "the sizing file"),
    (["size", SIZING, "--out", "{}"], "--out"),
    (["compare", "{}", str(ROOT)], "the first run"),
    (["compare", str(ROOT), "{}"], "the second run"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("argv", "label"), ARGUMENTS, ids=lambda a: " ".join(a) if isinstance(a, list) else a)
def test_every_path_argument_of_every_command(argv, label, kind, tmp_path, capsys):
    path = hostile(kind, tmp_path)
    err = error_of([path if a == "{}" else a for a in argv], capsys)
    assert err.startswith(f"planner: error: {label} "), err
    assert "bytes long" in err and ("takes at most 255 per name" in err or "takes at most 4,095" in err), err


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("command", "key"),
    [("validate", "workload.trace.path"), ("simulate", "workload.trace.path"), ("memory", "model"), ("size", "model")],
)
def test_a_path_inside_a_scenario(command, key, kind, tmp_path, capsys):
    value = hostile(kind, tmp_path)
    sets = [f"{key}={value}"]
    if key == "workload.trace.path":
        sets = ["workload.arrival={process: trace}", f"workload.trace={{path: {value}}}"]
    err = error_of([command, SCENARIO, *[a for s in sets for a in ("--set", s)]], capsys)
    assert err.startswith(f"planner: error: {SCENARIO}: {key} = "), err
    assert "bytes long" in err and ("at most 255 per name" in err or "at most 4,095" in err), err


def test_a_folder_with_no_room_for_its_files_is_refused_and_one_that_fits_is_not(tmp_path, capsys):
    # 4,080 bytes of folder: itself a path the system takes, but not with summary.json inside it
    deep = "/tmp/" + "/".join(["w" * 200] * 20) + "/" + "w" * 55
    assert len(deep) == 4_080
    err = error_of(["simulate", SCENARIO, "--out", deep], capsys)
    assert "leaves no room for the files in it" in err
    from planner.paths import too_long

    assert too_long(deep) is None  # as a file, it would fit
    assert too_long(str(tmp_path / ("v" * 255))) is None  # 255 bytes: a name as long as allowed
