"""What the install promises: our import names are ours alone, every package folder is installed, and the
dependencies we lean on import together with our modules in one process.

A dependency's release that breaks us should fail here, in one named test, rather than as collection errors
spread over the files that happen to import it first."""

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
OUR_IMPORT_NAMES = sorted({name.split(".")[0] for name in SETUPTOOLS["packages"]})


def folder_of(package: str) -> Path:
    """The folder pyproject.toml installs `package` from (its package-dir mapping, else the dotted path)."""
    top, _, rest = package.partition(".")
    base = ROOT / SETUPTOOLS.get("package-dir", {}).get(top, top)
    return base.joinpath(*rest.split(".")) if rest else base


def test_every_package_folder_of_the_tree_is_installed():
    """A folder of .py files under one of our import roots that pyproject.toml does not list would be missing
    from a wheel while an editable install (and so every test here) still found it."""
    listed = set(SETUPTOOLS["packages"])
    found = set()
    for top in OUR_IMPORT_NAMES:
        root = folder_of(top)
        for init in root.rglob("*.py"):
            rel = init.parent.relative_to(root)
            if "__pycache__" not in rel.parts:
                found.add(".".join([top, *rel.parts]))
    assert found == listed, (
        f"package folders not listed in pyproject.toml: {sorted(found - listed)}; listed but absent: {sorted(listed - found)}"
    )
    for package in listed:
        assert folder_of(package).is_dir(), package


def test_no_dependency_owns_one_of_our_import_names():
    """Each of our top-level import names, and each top-level folder of the checkout that is a regular
    package (a root on sys.path makes it importable), is owned by no installed distribution but ours."""
    checkout_packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    # and the tests' own helpers package, which tests/ on sys.path makes importable as `helpers`
    ours = set(OUR_IMPORT_NAMES) | checkout_packages | {"helpers"}
    owners: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name is None or name.lower() == "planner":
            continue
        for file in dist.files or []:
            top = file.parts[0]
            if top.startswith("..") or top.endswith((".dist-info", ".egg-info", ".pth")) or top == "__pycache__":
                continue
            owners.setdefault(top.removesuffix(".py"), set()).add(name)
    clashes = {name: sorted(owners[name]) for name in ours if name in owners}
    assert not clashes, f"import names of ours that an installed distribution also installs: {clashes}"
    assert "kernels" not in checkout_packages, (
        "kernels/ must stay a folder without __init__.py (see kernels/availability.py)"
    )


def test_transformers_models_and_every_kernel_module_import_in_one_process_run_from_the_checkout():
    """transformers imports Hugging Face's `kernels` whenever a model class is touched; run from the
    checkout's root (sys.path[0] = the root, as `python -m ...` there does), that must still be theirs while
    every module of our kernels folder imports too."""
    for name in ("torch", "transformers"):  # not installed: skip; installed and broken: fail, below
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed (the engine extra)")
    modules = sorted(f"planner_kernels.{p.stem}" for p in (ROOT / "kernels").glob("*.py"))
    code = (
        "import importlib, sys, transformers\n"
        "transformers.LlamaForCausalLM, transformers.Qwen2ForCausalLM\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "import kernels\n"
        "print(kernels.__file__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    try:
        importlib.metadata.distribution("kernels")
    except importlib.metadata.PackageNotFoundError:
        return  # an older transformers without Hugging Face's kernels: nothing of theirs to shadow
    hf_kernels = Path(done.stdout.strip().splitlines()[-1])
    assert hf_kernels.parent != ROOT / "kernels", f"`import kernels` found the checkout's folder: {hf_kernels}"


# Each dependency pyproject.toml names (the engine, dev and ray extras too) -> the module it is imported as
# (ruff is a program: run, not imported).
IMPORT_NAMES = {
    "numpy": "numpy", "pyyaml": "yaml", "simpy": "simpy", "matplotlib": "matplotlib", "scipy": "scipy",
    "torch": "torch", "transformers": "transformers", "safetensors": "safetensors", "triton": "triton",
    "pytest": "pytest", "pytest-xdist": "xdist", "hypothesis": "hypothesis", "ruff": None, "ray": "ray",
}  # fmt: skip
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"


def requirements() -> list:
    from packaging.requirements import Requirement

    project = PYPROJECT["project"]
    extras = [r for group in ("engine", "dev", "ray") for r in project["optional-dependencies"][group]]
    return [Requirement(text) for text in [*project["dependencies"], *extras]]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_dependency_imports_in_a_fresh_process():
    """The one place a dependency's release that breaks its own import (or ours, as transformers 5.25's
    `kernels` did) shows: named, with its version and the error. The engine's tests that need it skip saying so."""
    installed = []
    for req in requirements():
        module = IMPORT_NAMES[normalized(req.name)]
        if module is not None and importlib.util.find_spec(module) is not None:
            installed.append((req.name, module))
    assert installed
    failures = []
    for name, module in installed:  # one process each: a broken one takes no other with it
        code = f"import {module}"
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            version = importlib.metadata.version(name)
            failures.append(f"{name} {version}: {done.stderr.strip().splitlines()[-1]}")
    assert not failures, "dependencies that do not import: " + "; ".join(failures)


def test_the_constraints_file_pins_every_dependency_at_a_version_pyproject_allows():
    """.ci/constraints.txt: the exact versions of the last green run, for reproducing it (README, Tests). Every
    dependency pyproject.toml names is pinned there, each pin within pyproject.toml's bounds."""
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version and " " not in version, f"{CONSTRAINTS.name}: {line!r} is no name==version pin"
            pins[normalized(name)] = version
    for req in requirements():
        name = normalized(req.name)
        assert name in pins, f"{req.name} is not pinned in {CONSTRAINTS.name}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} is outside {req}"
    assert set(IMPORT_NAMES) == {normalized(r.name) for r in requirements()}
