"""Free-form JSON a client sends (an event's ``tool_args``): how deep it may go and which numbers it may hold."""

from __future__ import annotations

import json
from typing import Any

import pytest

from obsmem.errors import ValidationFailed
from obsmem.events import EventIn, parse_events, prepare_plain, redacted
from obsmem.json_shape import MAX_JSON_DEPTH, json_shape_problem
from obsmem.surfaces.http.responses import dumps


def nested_lists(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def nested_objects(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("build", [nested_lists, nested_objects])
def test_the_depth_limit_is_exact(build: Any) -> None:
    assert json_shape_problem(build(MAX_JSON_DEPTH)) is None
    problem = json_shape_problem(build(MAX_JSON_DEPTH + 1))
    assert problem == f"is nested more than {MAX_JSON_DEPTH} levels deep"


def test_a_value_far_deeper_than_the_stack_is_checked_without_recursion() -> None:
    assert json_shape_problem(nested_lists(100_000)) is not None


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_numbers_that_are_not_finite_are_named(number: float) -> None:
    assert json_shape_problem({"ok": [1, 2.5, "NaN"], "deep": [{"x": number}]}) == (
        "holds a number that is not finite (NaN or Infinity)"
    )


def test_tuples_are_walked_as_the_arrays_they_are_written_as() -> None:
    assert json_shape_problem({"x": (float("nan"),)}) == "holds a number that is not finite (NaN or Infinity)"
    assert json_shape_problem({"x": [(float("inf"),)]}) is not None


def test_ordinary_arguments_pass() -> None:
    assert json_shape_problem({"cmd": "pytest -q", "env": {"CI": "1"}, "argv": ["-k", 3, 1.5, None, True]}) is None
    assert json_shape_problem("a plain string") is None


def test_a_deep_event_is_refused_by_both_ways_in_and_the_limit_itself_is_stored() -> None:
    """The fast path for plain events hands a value it cannot take to the validator, which names the
    problem; a value at the limit is redacted (which walks it recursively) without running out of stack."""
    too_deep = {"role": "assistant", "type": "tool_call", "tool_args": nested_lists(600)}
    assert prepare_plain(dict(too_deep, seq=1)) is None
    with pytest.raises(ValidationFailed) as refused:
        parse_events([too_deep])
    assert refused.value.field == "events.0.tool_args"
    at_limit = EventIn.model_validate(
        {"role": "assistant", "type": "tool_call", "tool_args": nested_lists(MAX_JSON_DEPTH)}
    )
    assert redacted(at_limit).tool_args == nested_lists(MAX_JSON_DEPTH)


def strict_json(body: bytes) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(body, parse_constant=refuse)


@pytest.mark.parametrize("other", ["plain text", "half \ud800 a character", 2**70])
def test_a_number_stored_before_it_was_refused_renders_as_null(other: Any) -> None:
    """Arguments stored by an older version may hold NaN; a response holding one is strict JSON whichever
    encoder writes it (a lone surrogate or an integer past 64 bits sends it to the standard one)."""
    body = dumps({"tool_args": [float("nan"), {"x": float("-inf")}, 1.5], "other": other})
    assert strict_json(body)["tool_args"] == [None, {"x": None}, 1.5]
