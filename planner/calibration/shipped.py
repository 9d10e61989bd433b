"""Where calibrations live (the shipped ones, and the user's profile folder) and what was profiled: the one
module start-up needs to find them."""

from __future__ import annotations

import os
from pathlib import Path

from planner.errors import NO_SUCH_USER, PlannerError, expand_user, show_value

PROFILE_DIR = Path(__file__).resolve().parent.parent / "calibrations"  # planner/calibrations/<gpu>-tp<N>.yaml
DATA_DIR = PROFILE_DIR / "vidur"  # the public data they were fitted to, with its licence
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)  # Vidur's; LLMServingSim's bundles hold tp 1 (RTX 4090) and 1, 2 (RTX PRO 6000)
# Every profiled GPU and the tensor-parallel degrees it was measured at: Vidur's A100, A40 and H100
# (planner/calibrations/vidur/), LLMServingSim's RTX 4090 and RTX PRO 6000 (planner/calibrations/llmservingsim/).
PROFILED_TP = {
    "a100-80gb": TENSOR_PARALLEL_SIZES,
    "a40": TENSOR_PARALLEL_SIZES,
    "h100-sxm": TENSOR_PARALLEL_SIZES,
    "rtx-4090": (1,),
    "rtx-pro-6000": (1, 2),
}
PROFILED_GPUS = tuple(PROFILED_TP)


def profiled_pairs() -> list[tuple[str, int]]:
    """(GPU, tensor-parallel degree) of every shipped profile."""
    return [(gpu, tp) for gpu, tps in PROFILED_TP.items() for tp in tps]


# The host's launch gaps between kernels: not in Vidur's kernel durations, so not in the data. Every shipped
# profile (own or transferred) sets it to 0, which prices an eager step as its kernels' time (the host
# launching ahead of the GPU) and a graphed one the same: what the data show. The cost model's 40 us default
# would add launches to the kernel floor the profiles fit (public_fit.KERNEL_NAME).
NO_HOST_LAUNCH = {"launch_overhead_per_layer_s": 0.0}


def profile_path(gpu: str, tp: int) -> Path:
    return PROFILE_DIR / f"{gpu}-tp{tp}.yaml"


def default_profile_dir() -> Path:
    """$PLANNER_PROFILE_DIR, else $XDG_CONFIG_HOME/planner/profiles, else ~/.config/planner/profiles: a folder,
    or a path where none exists yet (no profile saved)."""
    for variable in ("PLANNER_PROFILE_DIR", "XDG_CONFIG_HOME"):
        value = os.environ.get(variable)
        if value:
            where = f"environment variable {variable} = {show_value(value)}"
            path = expand_user(value)
            if path is None:
                raise PlannerError(f"{where}: {NO_SUCH_USER}")
            return _folder(path if variable == "PLANNER_PROFILE_DIR" else path / "planner" / "profiles", where)
    return _folder(Path.home() / ".config" / "planner" / "profiles", "the calibration profile folder")


def _folder(path: Path, where: str) -> Path:
    # A file there would make `calibration: auto` skip the user's profiles without a word and use the public
    # ones, and `planner calibrate` fail to save.
    if path.exists() and not path.is_dir():
        raise PlannerError(
            f"{where}: {path} is not a folder; expected the folder of your calibration profiles"
            " (one that does not exist yet is fine: it is made when a profile is saved)"
        )
    return path
