"""The layering rules of docs/architecture.md, checked with import-linter over the package as it installs.

The stages live in top-level folders and install inside ``obsmem`` (``retrieval/`` is ``obsmem.retrieval``),
but lint-imports reads modules from the file system under the root package's folder. So the check lays out
the installed shape in a temporary folder (symbolic links to the real files, as setuptools' strict editable
install does) and runs lint-imports there, with the contracts of pyproject.toml.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"


def stage_names() -> tuple[str, ...]:
    """The stage folders setup.py installs inside ``obsmem`` (read from setup.py, not repeated here)."""
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "STAGES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("setup.py no longer names its STAGES")


def package_folder(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, f"{name} is not an installed package"
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def installed_layout(target: Path) -> Path:
    """``target/obsmem`` with the base package's entries and each stage folder linked in where it installs."""
    package = target / "obsmem"
    package.mkdir()
    stages = stage_names()
    for entry in package_folder("obsmem").iterdir():
        if entry.name not in stages and entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry.resolve())
    for stage in stages:
        (package / stage).symlink_to(package_folder(f"obsmem.{stage}"))
    return target


def lint_imports(layout: Path) -> subprocess.CompletedProcess[str]:
    # The console script's own code, run by this interpreter (a venv's bin/ may not hold the script).
    script = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    command = [sys.executable, "-c", script]
    environment = {**os.environ, "PYTHONPATH": str(layout), "PYTHONSAFEPATH": "1"}
    return subprocess.run(
        [*command, "--no-cache", "--no-logo", str(PYPROJECT)],
        cwd=layout,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_every_module_of_the_package_has_a_place_in_the_rules(tmp_path: Path) -> None:
    """A new base module or floor must be added to the contracts, or it would escape them silently."""
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    layered: set[str] = set()
    base: set[str] = set()
    for contract in contracts:
        if contract["type"] == "layers" and contract["containers"] == ["obsmem"]:
            for layer in contract["layers"]:
                layered.update(f"obsmem.{name.strip()}" for name in layer.replace(":", "|").split("|"))
        if contract["id"] == "base":
            base.update(contract["source_modules"])
    package = installed_layout(tmp_path) / "obsmem"
    children = {
        f"obsmem.{entry.stem}"
        for entry in package.iterdir()
        if (entry.suffix == ".py" and entry.stem != "__init__") or (entry / "__init__.py").exists()
    }
    assert children - layered - base == set()
    assert (layered | base) - children == set()


def public_faces() -> list[str]:
    """The packages whose inner modules the contracts protect (each one's face is its ``__init__``)."""
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    return [name for contract in contracts if contract["type"] == "protected" for name in contract["allowed_importers"]]


@pytest.mark.parametrize("face", public_faces())
def test_every_name_a_public_face_exports_resolves(face: str) -> None:
    """A face is all other layers may import, so each name it lists must load (those loaded on first use too)."""
    package = importlib.import_module(face)
    exported = package.__all__
    assert len(exported) == len(set(exported)), f"{face}.__all__ repeats a name"
    missing = [name for name in exported if getattr(package, name, None) is None]
    assert not missing, f"{face} exports names that do not load: {missing}"
    assert not hasattr(package, "no_such_name")  # an unknown name is an AttributeError, as for any module


def test_the_package_keeps_its_layering_rules(tmp_path: Path) -> None:
    result = lint_imports(installed_layout(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "imports", "contract"),
    [
        ("retrieval/fusion.py", "import obsmem.pipeline", "surfaces over eval"),
        ("pipeline/tokens.py", "from obsmem.retrieval import fusion", "surfaces over eval"),
        ("indexer/chunker.py", "from obsmem.pipeline import tokens", "surfaces over eval"),
        ("pipeline/tokens.py", "from obsmem.indexer import chunker", "The pipeline reaches the indexer"),
        ("retrieval/fusion.py", "import obsmem.app", "surfaces over eval"),
        ("eval/metrics.py", "import obsmem.surfaces.cli", "surfaces over eval"),
        ("surfaces/tools.py", "import obsmem.pydantic_ai", "Agent integrations over surfaces"),
        ("ids.py", "import obsmem.retrieval", "The base imports no stage"),
        ("work/queue.py", "from obsmem.app import Obsmem", "The base imports no stage"),
        (
            "surfaces/tools.py",
            "from obsmem.retrieval.search import MODES",
            "through its public face (obsmem.retrieval)",
        ),
        ("surfaces/http/routes/memory.py", "import obsmem.eval.runner", "through its public face (obsmem.eval)"),
        ("app/service.py", "from obsmem.indexer.engine import SemanticIndexer", "its public face (obsmem.indexer)"),
        ("eval/ingest.py", "from obsmem.app.results import IndexReport", "through its public face (obsmem.app)"),
        ("retrieval/exact.py", "from obsmem.storage.connection import ProjectDatabase", "face (obsmem.storage)"),
        ("pipeline/observe/packer.py", "from obsmem.pipeline.reflect import pool", "The pipeline: runtime over"),
        ("pipeline/tokens.py", "import obsmem.pipeline.views.status", "The pipeline: runtime over"),
        ("pipeline/reflect/pool.py", "from obsmem.pipeline import project", "Nothing inside the pipeline imports"),
    ],
)
def test_a_forbidden_import_breaks_the_check(tmp_path: Path, module: str, imports: str, contract: str) -> None:
    """The check itself can fail: a copy of the layout with one forbidden import added to a module is refused."""
    layout = installed_layout(tmp_path)
    target = layout / "obsmem" / module
    linked = [folder for folder in target.parents if folder.is_symlink()]
    if linked:
        # Make the linked package a real tree of links, so the edit lands in the copy, never in the repository.
        folder = linked[-1]
        real = folder.resolve()
        folder.unlink()
        shutil.copytree(real, folder, copy_function=os.symlink, ignore=shutil.ignore_patterns("__pycache__"))
    assert target.is_symlink() and not any(folder.is_symlink() for folder in target.parents)
    source = target.read_text()
    target.unlink()
    target.write_text(f"{source}\n{imports}\n")
    result = lint_imports(layout)
    assert result.returncode != 0
    assert contract in result.stdout
    assert module.removesuffix(".py").replace("/", ".") in result.stdout
