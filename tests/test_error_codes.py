"""Every error code that exists is drawn in the tree of obsmem/errors.py and listed in docs/http-api.md.

The codes are found in the code itself, not in a list kept here: every :class:`ObsmemError` subclass of the
installed package (errors.py and the modules that define their own), every code given where an error is
raised (``NotFound(..., code="session_not_found")``), and every code the HTTP server sends without an error
class (``error_response(405, "method_not_allowed", ...)``).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obsmem.errors
import obsmem.surfaces.http
from obsmem.errors import ObsmemError

ROOT = Path(__file__).resolve().parents[1]
HTTP_DOC = ROOT / "docs" / "http-api.md"
TOP_PACKAGES = ("obsmem", "obsmem.retrieval", "obsmem.pipeline", "obsmem.indexer", "obsmem.eval")
# Calls that send an error without an ObsmemError: the status comes first, the code right after it.
HTTP_SENDERS = {"error_response", "send_error"}


def package_modules() -> Iterator[str]:
    """Every module of the installed package (the stages install inside it, so each is walked too)."""
    for name in TOP_PACKAGES:
        package = importlib.import_module(name)
        yield name
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not module.name.endswith("__main__"):
                yield module.name


def error_classes() -> set[type[ObsmemError]]:
    for name in package_modules():
        importlib.import_module(name)
    found: set[type[ObsmemError]] = set()
    pending = [ObsmemError]
    while pending:
        for subclass in pending.pop().__subclasses__():
            if subclass.__module__.startswith("obsmem.") and subclass not in found:
                found.add(subclass)
                pending.append(subclass)
    return found


def source_trees() -> Iterator[tuple[Path, ast.Module]]:
    for name in package_modules():
        origin = importlib.util.find_spec(name).origin  # type: ignore[union-attr]
        assert origin is not None
        yield Path(origin), ast.parse(Path(origin).read_text(encoding="utf-8"))


def called_name(call: ast.Call) -> str | None:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)


def constant(node: ast.AST | None, kind: type) -> Any:
    """The value of a literal of exactly ``kind`` (so ``True`` is no status), else None."""
    return node.value if isinstance(node, ast.Constant) and type(node.value) is kind else None


def codes_given_where_raised(class_names: set[str]) -> set[str]:
    """``code="..."`` passed to an error class's constructor anywhere in the package."""
    return {
        keyword.value.value
        for _, tree in source_trees()
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and called_name(call) in class_names
        for keyword in call.keywords
        if keyword.arg == "code" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str)
    }


def http_codes() -> set[str]:
    """The codes the HTTP server writes itself: after the status in a sender call, a ``"code"`` key, ``code =``."""
    codes: set[str] = set()
    folder = Path(obsmem.surfaces.http.__file__).parent
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and called_name(node) in HTTP_SENDERS:
                for status, code in zip(node.args, node.args[1:], strict=False):
                    if constant(status, int) and constant(code, str):
                        codes.add(constant(code, str))
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if constant(key, str) == "code" and constant(value, str):
                        codes.add(constant(value, str))
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "code" for t in node.targets):
                values = [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else [node.value]
                codes.update(constant(value, str) for value in values if constant(value, str))
    return codes


def tree_lines() -> list[str]:
    doc = obsmem.errors.__doc__
    assert doc is not None
    return doc.splitlines()


def word(text: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.]){re.escape(text)}(?![\w])")


def documented_codes() -> set[str]:
    """Every `code` in a table row of docs/http-api.md."""
    rows = [line for line in HTTP_DOC.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    return {code for row in rows for code in re.findall(r"`([a-z]+(?:_[a-z]+)*)`", row)}


def test_every_error_class_is_drawn_in_the_tree_with_its_code() -> None:
    classes = error_classes()
    assert {"LeaseLost", "ReflectionOff", "StorageCorrupt", "GenerationLost"} <= {c.__name__ for c in classes}
    lines = tree_lines()
    missing = [
        f"{cls.__name__} ({cls.code})"
        for cls in sorted(classes, key=lambda c: c.__name__)
        if not any(word(cls.__name__).search(line) and word(cls.code).search(line) for line in lines)
    ]
    assert not missing, f"error classes missing from the tree of obsmem/errors.py: {missing}"


def test_the_tree_draws_only_classes_that_exist() -> None:
    drawn = {match for line in tree_lines() for match in re.findall(r"[├└]── (\w+)", line)}
    assert drawn and drawn <= {cls.__name__ for cls in error_classes()}, drawn - {c.__name__ for c in error_classes()}


def test_every_code_is_in_the_tree_and_the_http_tables() -> None:
    classes = error_classes()
    given = codes_given_where_raised({cls.__name__ for cls in classes})
    assert {"session_not_found", "mode_unavailable"} <= given
    sent = http_codes()
    assert {"request_timeout", "rate_limited", "over_capacity", "too_many_streams", "internal_error"} <= sent
    codes = {cls.code for cls in classes} | given | sent
    lines = tree_lines()
    undrawn = sorted(code for code in codes if not any(word(code).search(line) for line in lines))
    assert not undrawn, f"codes missing from the tree of obsmem/errors.py: {undrawn}"
    undocumented = sorted(codes - documented_codes())
    assert not undocumented, f"codes missing from the tables of docs/http-api.md: {undocumented}"


def test_a_name_an_error_marks_is_spelt_as_each_surface_asks() -> None:
    from obsmem.errors import NotFound, interface_name

    error = NotFound(f"pass {interface_name('session_id')} from a {interface_name('memory_search')} hit")
    assert error.message == str(error) == "pass session_id from a memory_search hit"
    assert error.to_dict()["message"] == error.message
    assert error.message_for({"session_id": "--session"}) == "pass --session from a memory_search hit"
    assert NotFound("no names marked").message_for({"session_id": "--session"}) == "no names marked"
