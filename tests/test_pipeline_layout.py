"""The pipeline's floor plan holds: the wings never import each other, the floor imports no wing, and other
layers import only the names ``obsmem.pipeline`` exports."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import obsmem.pipeline as pipeline

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "pipeline"
WINGS = ("observe", "reflect", "views")
# Each part of the pipeline and the parts it may import from (besides itself and the floor).
ALLOWED = {"observe": set(), "reflect": set(), "views": {"observe", "reflect"}, "floor": set()}


def imported_modules(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, module, names)`` of every ``import``/``from ... import`` in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []


def part_of(module: str) -> str | None:
    """Which part of the pipeline a module name belongs to (None: not the pipeline, or the runtime/face)."""
    parts = module.split(".")
    if parts[:2] != ["obsmem", "pipeline"] or len(parts) < 3 or parts[2] == "runtime":
        return None
    return parts[2] if parts[2] in WINGS else "floor"


def layout_problems(root: Path) -> list[str]:
    """Imports under a pipeline folder that cross the floor plan (empty: none)."""
    problems: list[str] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.name == "__init__.py" and len(relative.parts) == 1 or relative.name == "runtime.py":
            continue  # the face and the runtime wire everything
        here = relative.parts[0] if len(relative.parts) > 1 else "floor"
        for line, module, _ in imported_modules(path):
            if module == "obsmem.pipeline" or module.endswith(".runtime"):
                problems.append(f"{relative}:{line} imports {module} (the face or the runtime) from inside")
                continue
            there = part_of(module)
            if there is not None and there not in (here, "floor") and there not in ALLOWED[here]:
                problems.append(f"{relative}:{line} ({here}) imports {module} ({there})")
            elif here == "floor" and there in WINGS:
                problems.append(f"{relative}:{line} (floor) imports {module} ({there})")
    return problems


def test_wings_and_floor_import_only_what_their_layer_allows() -> None:
    problems = layout_problems(PIPELINE)
    assert not problems, "\n".join(problems)


def test_other_layers_import_only_the_public_face() -> None:
    exported = set(pipeline.__all__)
    assert all(hasattr(pipeline, name) for name in exported)
    problems: list[str] = []
    for folder in ("obsmem", "eval", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, module, names in imported_modules(path):
                if module.startswith("obsmem.pipeline."):
                    problems.append(f"{path.relative_to(ROOT)}:{line} reaches into {module}")
                elif module == "obsmem.pipeline" and set(names) - exported:
                    problems.append(f"{path.relative_to(ROOT)}:{line} imports {sorted(set(names) - exported)}")
    assert not problems, "\n".join(problems)


def test_the_layout_check_fails_on_a_wing_reaching_into_another(tmp_path: Path) -> None:
    (tmp_path / "observe").mkdir()
    (tmp_path / "observe" / "packer.py").write_text("from obsmem.pipeline.reflect.pool import read_pool\n")
    (tmp_path / "observe" / "fine.py").write_text("from obsmem.pipeline.tokens import estimate_tokens\n")
    (tmp_path / "tokens.py").write_text("import obsmem.pipeline.views.status\nfrom obsmem.pipeline import project\n")
    assert layout_problems(tmp_path) == [
        "observe/packer.py:1 (observe) imports obsmem.pipeline.reflect.pool (reflect)",
        "tokens.py:1 (floor) imports obsmem.pipeline.views.status (views)",
        "tokens.py:2 imports obsmem.pipeline (the face or the runtime) from inside",
    ]
