"""Which coefficients a scenario's simulation uses (`resolve_cost_model`) and where they came from: a
profile file, the newest matching profile in the user's profile folder, or the shipped public calibrations."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from planner.calibration.device_gpu import calibration_gpu
from planner.calibration.provenance import SPEC_SHEET, Provenance, residual_spread
from planner.calibration.shipped import default_profile_dir
from planner.errors import NO_SUCH_USER, PlannerError, expand_user, show_value
from sim.config import HOST_DEVICES, Scenario
from sim.cost_coefficients import CostCoefficients

if TYPE_CHECKING:
    from planner.calibration.profile import Profile


def mismatches(profile: Profile, scenario: Scenario, check_model: bool = True) -> list[str]:
    """What differs between where the profile was measured and what the scenario simulates."""
    out = []
    gpu = calibration_gpu(scenario.hardware.gpu).name
    if profile.device["gpu"] != gpu:
        out.append(f"it was measured on {profile.device['gpu'] or profile.device['name']}, the scenario's GPU is {gpu}")
    if profile.dtype != scenario.dtype:
        out.append(f"its dtype is {profile.dtype}, the scenario's is {scenario.dtype}")
    tp = scenario.hardware.tensor_parallel_size
    if profile.tensor_parallel_size != tp:
        out.append(f"its tensor_parallel_size is {profile.tensor_parallel_size}, the scenario's is {tp}")
    if check_model and profile.model is not None and profile.model != scenario.model.name:
        out.append(f"its model is {profile.model}, the scenario's is {scenario.model.name}")
    return out


def _date(profile: Profile) -> str:
    return profile.created[:10]


def _uncertainty(profile: Profile) -> dict[str, float]:
    """The coefficients' stds and the fit's residual spread: what `--intervals` draws."""
    return dict(profile.uncertainty) | residual_spread(profile.fit)


def calibrated(profile: Profile) -> Provenance:
    label = f"calibrated ({profile.id}, {_date(profile)}, {profile.device['name']})"
    return Provenance("calibrated", label, profile.id, _uncertainty(profile))


def transferred(profile: Profile) -> Provenance:
    label = f"transferred (from {profile.id}: {profile.model} on {profile.device['name']}, {_date(profile)})"
    return Provenance("transferred", label, profile.id, _uncertainty(profile))


def _profiles_in(folder: Path) -> list[Profile]:
    paths = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    if not paths:
        return []
    from planner.calibration.profile_loader import load_profile  # only with profiles to read (~1% of a start-up)

    return [load_profile(p) for p in paths]


def _newest(profiles: list[Profile]) -> Profile | None:
    return max(profiles, key=lambda p: p.created) if profiles else None


def resolve_cost_model(
    scenario: Scenario, calibration: str | None = None, base_dir: Path | None = None
) -> tuple[CostCoefficients, Provenance]:
    """The coefficients for this scenario and where they came from.

    `calibration` (the --calibration flag; None: the scenario's `calibration` key): a profile FILE, used
    only if it was measured on the scenario's GPU, dtype, tensor parallel size and model (or is GPU-wide);
    or `auto`: the newest profile in the user's folder that matches all four (`calibrated`), else the
    newest there on the same GPU, dtype and tensor parallel size for another model (`transferred`), else the
    shipped public calibrations: the GPU's own (`calibrated`) or transferred to it from the profiled GPUs;
    a CPU keeps the spec-sheet defaults.
    """
    choice = calibration if calibration is not None else scenario.calibration
    if choice != "auto":
        from planner.calibration.profile import ProfileError
        from planner.calibration.profile_loader import load_profile

        path = expand_user(choice)
        if path is None:
            where = "--calibration " if calibration is not None else f"{scenario.source}: calibration = "
            raise PlannerError(f"{where}{show_value(choice)}: {NO_SUCH_USER}")
        if not path.is_absolute() and calibration is None:  # the scenario key: relative to the scenario's folder
            path = (base_dir if base_dir is not None else Path(scenario.source).absolute().parent) / path
        profile = load_profile(path)
        problems = mismatches(profile, scenario)
        if problems:
            raise ProfileError(
                f"{path}: calibration profile {profile.id} does not match scenario {scenario.source}: "
                + "; ".join(problems)
                + " (use `calibration: auto`, or calibrate for this scenario: planner calibrate)"
            )
        return profile.cost_coefficients(), calibrated(profile)
    profiles = _profiles_in(default_profile_dir())
    same = _newest([p for p in profiles if not mismatches(p, scenario)])
    if same is not None:
        return same.cost_coefficients(), calibrated(same)
    other = _newest([p for p in profiles if not mismatches(p, scenario, check_model=False)])
    if other is not None:
        return other.cost_coefficients(), transferred(other)
    return _public(scenario)


def _public(scenario: Scenario) -> tuple[CostCoefficients, Provenance]:
    """The shipped public calibrations (planner/calibrations/): the GPU's own profile, or coefficients
    transferred from the profiled GPUs with the spread leave-one-GPU-out measured. A CPU is no GPU:
    nothing transfers to it, it keeps the spec-sheet defaults until `planner calibrate --device cpu`."""
    gpu = scenario.hardware.gpu
    if gpu.name in HOST_DEVICES:
        return CostCoefficients(), SPEC_SHEET
    gpu = calibration_gpu(gpu)
    from planner.calibration.transfer import public_cost_model  # reads one to three small YAML files

    tp = scenario.hardware.tensor_parallel_size
    quantized = scenario.model.quant_method is not None
    coefficients, uncertainty, label, ids = public_cost_model(gpu, scenario.dtype, tp, quantized)
    if scenario.model.is_mla:
        from planner.calibration.transfer import unmeasured_kernels

        uncertainty, caveat = unmeasured_kernels(uncertainty)
        label += caveat
    kind = "calibrated" if label.startswith("calibrated") else "transferred"
    profile_id = ", ".join(ids)
    return CostCoefficients(**coefficients), Provenance(kind, label, profile_id, uncertainty)
