"""`planner calibrate` end to end on the CPU with a small budget, `--from` on a `planner run` folder (also
without torch), and the command's refusals (exit 2, one message, no traceback)."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, cuda_available, needs_torch

from planner.calibration.profile_loader import load_profile
from planner.cli import main
from planner.errors import PlannerError
from sim.engine_facts import EngineFacts
from sim.metrics import STEP_COLUMNS


@needs_torch
def test_calibrate_on_the_cpu_end_to_end(tmp_path, capsys):
    out = tmp_path / "tiny.yaml"
    args = ["calibrate", "--device", "cpu", "--budget-s", "4", "--held-out-requests", "6", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    for words in ("Memory probe", "num_gpu_blocks", "Step sweep:", "Fit over", "median |err|", "worst steps"):
        assert words in printed
    assert "First step after idle: 30 steps of 6 shapes timed after 50 ms idle and warm" in printed
    for name in ("light", "saturated", "closed", "long", "preemption", "shared"):
        assert f"\n  {name} " in printed
    assert "mean_tpot_ms" in printed and "target <= 10%" in printed

    profile = load_profile(out)
    assert profile.model == "tiny-llama" and profile.dtype == "float32" and profile.source == "live-sweep"
    assert profile.device["kind"] == "cpu" and profile.engine["cpu_threads"] == 1
    assert profile.coefficients and profile.fit["rows"] >= 8
    assert profile.coefficients["idle_wake_s"] >= 0 and profile.uncertainty["idle_wake_s"] >= 0  # sweep_idle timed it
    with open(out.parent / profile.rows) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 8 and set(STEP_COLUMNS) <= set(rows[0]) and {"spread_rel", "stable"} <= set(rows[0])

    report = tmp_path / "tiny-validation"
    markdown = (report / "calibration.md").read_text()
    assert markdown.count("### ") == 6 and "| TPOT mean |" in markdown
    assert (report / "latency_cdfs.png").stat().st_size > 10_000
    assert (report / "step_scatter.png").stat().st_size > 10_000


@pytest.fixture
def run_dir(cpu_tiny_run):
    return cpu_tiny_run.folder


def test_from_fits_a_run_folder(run_dir, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "from-runs.yaml"
    assert main(["calibrate", "--from", str(run_dir), "--out", str(out)]) == 0
    assert "wrote the profile" in capsys.readouterr().out
    profile = load_profile(out)
    assert profile.source == "live-runs" and profile.model == "tiny-llama"


def test_from_warns_of_a_run_on_a_busy_cpu(run_dir, tmp_path, capsys):
    import json
    import shutil

    summary = json.loads((run_dir / "summary.json").read_text())
    assert 0 < summary["cpu_share"] <= 1  # the live run measured its share of the CPU
    quiet, busy = tmp_path / "quiet", tmp_path / "busy"  # copies: the real run's share depends on this machine
    for folder, share in ((quiet, 0.98), (busy, 0.42)):
        shutil.copytree(run_dir, folder)
        (folder / "summary.json").write_text(json.dumps(summary | {"cpu_share": share, "other_cpu_load": 0.0}))
    capsys.readouterr()
    assert main(["calibrate", "--from", str(quiet), str(busy), "--out", str(tmp_path / "p.yaml")]) == 0
    out = capsys.readouterr().out
    assert f"warning: {busy}: a busy machine (the engine computed only 42%" in out and f"warning: {quiet}:" not in out


def cli(*args: str, block_torch: bool = False) -> subprocess.CompletedProcess:
    code = "import sys\n"
    if block_torch:  # as on a machine without the engine extra: `import torch` fails
        code += "sys.modules['torch'] = None\n"
    code += f"from planner.cli import main\nsys.exit(main({list(args)!r}))\n"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)


def test_from_needs_no_torch(run_dir, tmp_path):
    result = cli("calibrate", "--from", str(run_dir), "--out", str(tmp_path / "p.yaml"), block_torch=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        ([], ["--device cpu", "--gpu", "--from"]),
        (["--gpu", "--device", "cpu"], ["--gpu", "--device cpu"]),
        (["--device", "cpu", "--budget-s", "0"], ["--budget-s", "0", "positive"]),
        (["--device", "cpu", "--budget-s", "inf"], ["--budget-s inf", "finite positive number of seconds"]),
        (["--device", "cpu", "--budget-s", "nan"], ["--budget-s nan", "finite positive number of seconds"]),
        (["--device", "cpu", "--held-out-requests", "1"], ["--held-out-requests", "1", "at least 4"]),
        pytest.param(
            ["--device", "cpu", "nonexistent.yaml"], ["nonexistent.yaml", "no such scenario file"], marks=needs_torch
        ),  # refused after torch is found
        pytest.param(
            ["--device", "cpu", "--model", "no-such-model"], ["no-such-model"], marks=needs_torch
        ),  # refused after torch is found
        pytest.param(
            ["--device", "cpu", "--model", "tiny-llama", "scenarios/cpu_tiny.yaml"],
            ["--model", "scenario"],
            marks=needs_torch,
        ),  # refused after torch is found
        (["--device", "cpu", "--out", "x.yaml", "scenarios/cpu_tiny.yaml", "scenarios/cpu_tiny.yaml"], ["--out", "2"]),
        (["--device", "cpu", "scenarios/cpu_tiny.yaml", "./scenarios/cpu_tiny.yaml"], ["cpu_tiny.yaml: given twice"]),
        (["--from", "/nonexistent/run"], ["/nonexistent/run"]),
        (["--from", ".", "--device", "cpu"], ["--from", "--device"]),
    ],
)
def test_calibrate_refuses_clearly(args, words):
    result = cli("calibrate", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr


def no_sweep(monkeypatch) -> list:
    """calibrate up to the sweep: the profile paths it would have written, and no sweep."""
    from planner.calibration import command

    paths = []
    monkeypatch.setattr(command, "calibrate_scenario", lambda scenario, device, budget, path, held: paths.append(path))
    return paths


@pytest.mark.parametrize(
    "case, words",
    [
        ("under_a_file", "f.yaml exists and is not a folder"),
        ("virtual_file_system", "cannot write /proc/x.yaml: No such file or directory"),
        ("rows_name_is_a_folder", "cannot write {tmp}/q.rows.csv: Is a directory"),
        ("report_name_is_a_file", "{tmp}/p-validation exists and is not a folder"),
        ("name_too_long", "File name too long"),
    ],
)
@needs_torch
def test_out_is_checked_before_the_sweep(tmp_path, monkeypatch, capsys, case, words):
    (tmp_path / "f.yaml").write_text("")
    (tmp_path / "q.rows.csv").mkdir()
    (tmp_path / "p-validation").write_text("")
    out = {
        "under_a_file": tmp_path / "f.yaml" / "x.yaml",
        "virtual_file_system": Path("/proc/x.yaml"),
        "rows_name_is_a_folder": tmp_path / "q.yaml",
        "report_name_is_a_file": tmp_path / "p.yaml",
        "name_too_long": tmp_path / ("x" * 250 + ".yaml"),
    }[case]
    paths = no_sweep(monkeypatch)
    assert main(["calibrate", "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"planner: error: --out {out}: " in err and words.format(tmp=tmp_path) in err and not paths
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.yaml", "p-validation", "q.rows.csv"]  # none left


def test_a_failed_write_names_the_file(run_dir, tmp_path, monkeypatch, capsys):
    from planner.calibration import profile

    def full_disk(prof, path):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(profile, "save_profile", full_disk)
    out = tmp_path / "p.yaml"
    assert main(["calibrate", "--from", str(run_dir), "--out", str(out)]) == 2
    assert f"planner: error: cannot write {out}: No space left on device" in capsys.readouterr().err


@pytest.mark.parametrize(
    "model, name",
    [("../../escaped", "_.._escaped"), ("org/model-7B.v2", "org_model-7B.v2"), ("..", "model"), ("a b", "a_b")],
)
def test_a_model_name_becomes_a_file_name_in_the_profile_folder(model, name):
    from planner.calibration.calibrate import file_name

    assert file_name(model) == name


@needs_torch
def test_a_model_named_like_a_path_stays_in_the_profile_folder(tmp_path, monkeypatch):
    import json

    model = {"name": "../../escaped", "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
             "max_position_embeddings": 2048}  # fmt: skip
    scenario = (
        (ROOT / "scenarios" / "cpu_tiny.yaml").read_text().replace("model: tiny-llama", f"model: {json.dumps(model)}")
    )
    (tmp_path / "escape.yaml").write_text(scenario)
    folder = tmp_path / "a" / "profiles"
    monkeypatch.setenv("PLANNER_PROFILE_DIR", str(folder))
    paths = no_sweep(monkeypatch)
    assert main(["calibrate", "--device", "cpu", str(tmp_path / "escape.yaml")]) == 0
    assert paths == [folder / "_.._escaped-float32-cpu.yaml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "escape.yaml"]  # nothing written outside it


@needs_torch
@pytest.mark.skipif(cuda_available(), reason="checks the refusal where no GPU is visible")
def test_gpu_without_a_gpu_is_refused():
    result = cli("calibrate", "--gpu")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "no CUDA device" in result.stderr and "--device cpu" in result.stderr


def test_without_torch_calibrate_says_to_install_the_engine_extra():
    result = cli("calibrate", "--device", "cpu", block_torch=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "pip install 'planner[engine]'" in result.stderr


@pytest.mark.parametrize(
    "device_name, total_gib, entry",
    [
        ("NVIDIA H100 80GB HBM3", 79.1, "h100-sxm"),
        ("NVIDIA H100 PCIe", 79.1, "h100-pcie"),
        ("NVIDIA H200", 139.8, "h200"),
        ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", 79.1, "a100-80gb"),
        ("NVIDIA A10G", 22.0, "a10g"),
        ("NVIDIA L40S", 44.4, "l40s"),
    ],
)
def test_the_cuda_device_is_found_in_the_gpu_catalog(monkeypatch, device_name, total_gib, entry):
    torch = pytest.importorskip("torch")

    from planner.calibration import defaults

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: device_name)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (0, int(total_gib * 2**30)))
    assert defaults.catalog_gpu_for_device() == entry


def test_a_profile_names_the_device_measured_not_the_scenarios_gpu():
    from planner.calibration.device_gpu import measured_gpu

    assert measured_gpu("a10", "cpu", "cpu", None, "run") == "cpu"  # the host, whatever the scenario names
    assert measured_gpu("a10", "cuda", "NVIDIA H100 80GB HBM3", 79 * 2**30, "run") == "h100-sxm"
    assert measured_gpu("a10", "cuda", "NVIDIA B200", 179 * 2**30, "run") == "b200"
    assert measured_gpu("my-card", "cuda", "NVIDIA GeForce RTX 5090", 31 * 2**30, "run") == "my-card"  # inline
    with pytest.raises(PlannerError, match=r"run: measured on 'NVIDIA GeForce RTX 5090', which has no GPU catalog"):
        measured_gpu("h100-sxm", "cuda", "NVIDIA GeForce RTX 5090", 31 * 2**30, "run")


@needs_torch
def test_a_run_on_the_cpu_gives_a_cpu_profile_whatever_gpu_its_scenario_names(tmp_path, capsys):
    # A tiny model "on an a10" run on this CPU once gave an a10 profile, and `calibration: auto` then priced every
    # A10 simulation from the CPU (TPOT 2,698 ms where the shipped calibration gives 33 ms).
    run = tmp_path / "on_a10"
    args = ["--set", "hardware.gpu=a10", "--set", "workload.num_requests=24"]
    assert main(["run", "scenarios/cpu_tiny.yaml", "--device", "cpu", "--out", str(run), "--json", *args]) == 0
    capsys.readouterr()
    out = tmp_path / "profile.yaml"
    assert main(["calibrate", "--from", str(run), "--out", str(out)]) == 0
    assert "hardware.gpu a10 -> cpu: the profile is of the device that was measured" in capsys.readouterr().out
    assert load_profile(out).device["gpu"] == "cpu"


def test_the_cuda_default_is_the_largest_catalog_model_that_fits(monkeypatch):
    from planner.calibration import defaults
    from planner.catalog import load_model_catalog
    from sim.memory import memory_breakdown
    from sim.memory_fit import fit_problems

    monkeypatch.setattr(defaults, "catalog_gpu_for_device", lambda: "a10")
    scenario = defaults.default_scenario("cuda", None)
    facts = EngineFacts.of(scenario)
    assert not fit_problems(facts, memory_breakdown(facts))
    assert scenario.dtype == "bfloat16" and scenario.max_model_len <= defaults.CUDA_MAX_MODEL_LEN
    larger = [m for m in load_model_catalog().values() if m.num_params > scenario.model.num_params]
    assert larger
    for model in larger:  # none of them fits one A10
        with pytest.raises(PlannerError, match=f"--model {model.name}"):
            defaults.default_scenario("cuda", model.name)
    assert defaults.default_scenario("cuda", "tiny-llama").model.name == "tiny-llama"
