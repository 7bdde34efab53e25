"""Prepared events: the plain way (no model built) prepares exactly what validating the event does.

``prepare_plain`` takes the events transcript readers make without building an ``EventIn``; anything it
is not sure of it declines (None), and the importer validates those through the model. What it does
prepare must equal ``prepare_event(EventIn.model_validate(fields))`` field for field, redaction and
fingerprint included, and it must never accept what the model refuses.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from obsmem.events import MAX_EVENT_CONTENT, EventIn, PreparedEvent, prepare_event, prepare_plain
from obsmem.transcripts.records import message, tool_call, tool_result

SECRET = "sk-ant-api03-" + "Q" * 40

texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "plain words", f"key {SECRET}", "caf\u00e9 \u2603", "lone \ud800 surrogate", "x" * 300]),
)
stamps = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "2025-06-01T10:00:00Z",
            "2025-06-01T10:00:00.123Z",
            "2025-06-01T10:00:00.123456Z",
            "2025-06-01T10:00:00.1Z",
            "2025-06-01T10:00:00+05:30",
            "2025-06-01T10:00:00.250-08:00",
            "2025-06-01T10:00:00",
            "2025-06-01 10:00:00Z",
            "0001-01-01T00:30:00+01:00",
            "9999-12-31T23:59:59-01:00",
            "2025-02-30T10:00:00Z",
            "2025-06-01T24:00:00Z",
            "2025-06-01T23:59:60Z",
            "yesterday",
            "",
        ]
    ),
    st.integers(),
    st.text(max_size=30),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), texts),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=8,
)
arguments = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["command", "password", "path", "api_key"]), texts, max_size=3),
    st.dictionaries(texts, json_values, max_size=3),
    st.lists(json_values, max_size=3),
    texts,
    st.integers(),
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "tool", "system", "robot", 1]),
        "type": st.sampled_from(["message", "tool_call", "tool_result", "note"]),
        "content": st.one_of(texts, st.none(), st.integers()),
        "tool_name": st.one_of(st.none(), texts, st.just("n" * 257)),
        "tool_args": arguments,
        "tool_call_id": st.one_of(st.none(), texts),
        "created_at": stamps,
        "seq": st.integers(min_value=-1, max_value=5),
        "extra": st.just(1),
    },
)


def _by_model(event: dict[str, Any]) -> PreparedEvent | None:
    try:
        return prepare_event(EventIn.model_validate(event))
    except ValidationError:
        return None


@settings(max_examples=600, deadline=None)
@given(event=fields)
def test_the_plain_way_prepares_what_the_model_does_or_declines(event: dict[str, Any]) -> None:
    plain = prepare_plain(event)
    if plain is not None:
        assert plain == _by_model(event)


def test_what_the_readers_make_takes_the_plain_way() -> None:
    stamp = "2025-06-01T10:00:00.123Z"
    events = [
        message("user", f"fix the login test, the key is {SECRET}", stamp),
        message("assistant", "caf\u00e9 done", None),
        tool_call("Bash", {"command": "pytest -q", "description": "run"}, "toolu_01", stamp, 20_000),
        tool_call("Edit", {"edits": [{"old": "a\u00e9", "new": "b"}], "password": "hunter2"}, "toolu_02", stamp, 200),
        tool_result("Bash", "x" * 30_000, "toolu_01", stamp, 20_000, error=True),
    ]
    for event in events:
        plain = prepare_plain(event)
        assert plain is not None and plain == _by_model(event)
    assert SECRET not in prepare_plain(events[0]).content  # type: ignore[union-attr]


def test_what_the_model_refuses_is_declined() -> None:
    refused = [
        {"role": "user", "content": "x" * (MAX_EVENT_CONTENT + 1)},
        {"role": "user", "content": "lone \ud800"},
        {"role": "user", "content": "t", "created_at": "2025-06-01T24:00:00Z"},
        {"role": "robot", "content": "t"},
        {"role": "tool", "type": "tool_result", "tool_name": "n" * 257},
        {"role": "assistant", "type": "tool_call", "tool_args": {"k": "lone \ud800"}},
        {"role": ["user"], "content": "t"},  # unhashable: once a TypeError out of the plain way
        {"role": "user", "type": {"message": 1}, "content": "t"},
    ]
    for event in refused:
        assert prepare_plain(event) is None and _by_model(event) is None
