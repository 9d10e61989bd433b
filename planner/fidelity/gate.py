"""The fidelity gate: every tracked comparison (the shipped profiles' fits, the transfer folds, the public
end-to-end figures, the development set, speculative decoding's and data parallel's public measurements) against the bound stored for it in planner/fidelity/bounds.yaml.

`python -m planner.fidelity --check` fails, naming each figure that got worse than its bound, and
tests/test_fidelity_gate.py runs it in CI. A change that improves a figure leaves the gate green; writing the
new bounds (`--write-bounds`) is a deliberate step, committed with the change, so the next change is held to
them. Every figure is an error (a fraction: 0.05 = 5%), lower is better, except those named `.coverage`
(higher is better). A figure newly tracked has no bound until written; one that disappears is reported too.
"""

from __future__ import annotations

from pathlib import Path

import yaml

BOUNDS_PATH = Path(__file__).resolve().parent / "bounds.yaml"
# A bound holds the figure as written plus this much: the figures are deterministic (seeded simulations,
# closed-form fits), so the slack only absorbs the last digits a library's float sums may move.
SLACK = 0.002
HIGHER_IS_BETTER = (".coverage",)


def _profile_figures() -> dict[str, float]:
    from planner.calibration.public_profiles import shipped_profiles

    out = {}
    for p in shipped_profiles():
        name = f"profile.{p['device']['gpu']}-tp{p['tensor_parallel_size']}"
        fit = p.get("fit") or {}
        out[name + ".step_median"] = fit.get("median_abs_error")
        out[name + ".step_p90"] = fit.get("p90_abs_error")
        for cls, stats in (fit.get("by_class") or {}).items():
            out[f"{name}.{cls}.median"] = stats.get("median")
            out[f"{name}.{cls}.p90"] = stats.get("p90")
    return {k: float(v) for k, v in out.items() if v is not None}


def _transfer_figures() -> dict[str, float]:
    from planner.calibration.transfer import FOLDS_PATH, load_yaml

    out = {}
    for f in load_yaml(FOLDS_PATH)["folds"]:
        name = f"transfer.{f['held_out']}.from.{'+'.join(f['sources'])}.tp{f['tensor_parallel_size']}"
        for key in ("layer_median_abs_error", "layer_p90_abs_error", "step_median_abs_error", "step_p90_abs_error"):
            out[f"{name}.{key.replace('_abs_error', '')}"] = float(f[key])
    return out


def _public_figures() -> dict[str, float]:
    from planner.calibration.transfer import public_cost_model
    from planner.catalog import load_gpu_catalog
    from planner.fidelity.public_figures import PUBLIC_FIGURES, simulate_figure

    catalog = load_gpu_catalog()
    out = {}
    for f in PUBLIC_FIGURES:
        coefficients = public_cost_model(catalog[f.gpu], f.dtype, f.tensor_parallel_size)[0]
        out[f"public.{f.key}.abs"] = round(abs(simulate_figure(f, coefficients) / f.published - 1), 4)
    return out


def figures() -> dict[str, float]:
    """Every tracked figure, by name."""
    from planner.fidelity import data_parallel, devset_summary, lss, speculative

    return (
        _profile_figures()
        | _transfer_figures()
        | _public_figures()
        | lss.tracked()
        | devset_summary.tracked()
        | speculative.tracked()
        | data_parallel.tracked()
    )


def load_bounds(path: Path = BOUNDS_PATH) -> dict[str, float]:
    if not path.exists():
        return {}
    return {k: float(v) for k, v in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).items()}


def write_bounds(values: dict[str, float], path: Path = BOUNDS_PATH) -> Path:
    header = "# Written by `python -m planner.fidelity --write-bounds`: the bound each tracked figure is held to.\n"
    body = yaml.safe_dump({k: round(v, 4) for k, v in sorted(values.items())}, sort_keys=False, width=120)
    path.write_text(header + body, encoding="utf-8")
    return path


def worse(values: dict[str, float], bounds: dict[str, float]) -> list[str]:
    """One line per figure that is worse than its bound, is missing, or has no bound."""
    problems = []
    for name, bound in bounds.items():
        if name not in values:
            problems.append(f"{name}: tracked (bound {bound:.4f}) but no longer computed")
            continue
        value = values[name]
        higher = name.endswith(HIGHER_IS_BETTER)
        if (value < bound - SLACK) if higher else (value > bound + SLACK):
            direction = "below" if higher else "above"
            problems.append(f"{name}: {value:.4f}, {direction} its bound {bound:.4f}")
    for name, value in values.items():
        if name not in bounds:
            problems.append(f"{name}: {value:.4f}, no bound stored (python -m planner.fidelity --write-bounds)")
    return problems
