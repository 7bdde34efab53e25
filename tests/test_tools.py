"""Agent tools: the function definitions and what execute_tool returns for good and bad calls."""

from __future__ import annotations

import json
from typing import Any

import apsw
import pytest

from obsmem.app import Obsmem
from obsmem.surfaces.tools import execute_tool, run_tool, tool_definitions
from support.http_server import ALPHA_NOTES, seed


@pytest.fixture
def ids(service: Obsmem) -> list[str]:
    seed(service, "alpha", ALPHA_NOTES)
    return seed(service, "alpha", [("2026-03-01 10:00", "medium", "Second session note about MapToolArguments")], "s2")


def test_definitions_have_the_openai_function_shape() -> None:
    for mode in ("exact", "hybrid"):
        definitions = tool_definitions(mode)
        assert [d["function"]["name"] for d in definitions] == ["memory_search", "recall", "memory"]
        for definition in definitions:
            assert definition["type"] == "function"
            assert set(definition["function"]) == {"name", "description", "parameters"}
            parameters = definition["function"]["parameters"]
            assert parameters["type"] == "object" and parameters["additionalProperties"] is False
            json.dumps(definition)  # plain JSON
        search, recall, memory = (d["function"]["parameters"] for d in definitions)
        assert search["required"] == ["query"] and set(search["properties"]) == {
            "query",
            "after",
            "before",
            "limit",
            "session_id",
            "scope",
            "trust",
        }
        assert memory["required"] == ["action"] and set(memory["properties"]) == {
            "action",
            "content",
            "situation",
            "tier",
            "id",
        }
        assert search["properties"]["scope"]["enum"] == ["memories", "conversation", "all"]
        assert search["properties"]["limit"] == search["properties"]["limit"] | {"minimum": 1, "maximum": 50}
        assert recall["required"] == ["id"] and set(recall["properties"]) == {"id", "session_id"}


def test_descriptions_carry_the_guidance_and_switch_with_mode() -> None:
    exact = {d["function"]["name"]: d["function"] for d in tool_definitions("exact")}
    hybrid = {d["function"]["name"]: d["function"] for d in tool_definitions("hybrid")}
    for tools in (exact, hybrid):
        text = tools["memory_search"]["description"]
        assert "No hits does not prove" in text
        assert "not a match score" in text
        assert "verify the current repository or PR state" in text
        assert "not a match score" in tools["recall"]["description"]
        assert "session_id" in tools["recall"]["description"]
    assert "literal substring" in exact["memory_search"]["description"]
    assert "single identifier" in exact["memory_search"]["description"]
    assert "exact phrase" in exact["memory_search"]["description"]
    assert "natural-language" in hybrid["memory_search"]["description"]
    assert "paraphrase" in hybrid["memory_search"]["description"]
    assert "relevant first" in hybrid["memory_search"]["description"]
    assert "literal substring" not in hybrid["memory_search"]["description"]
    # Same tool names and arguments in both modes; only the words change.
    exact_props = exact["memory_search"]["parameters"]["properties"]
    hybrid_props = hybrid["memory_search"]["parameters"]["properties"]
    assert exact_props.keys() == hybrid_props.keys()
    assert exact_props["query"]["description"] != hybrid_props["query"]["description"]
    assert exact_props["limit"]["description"] != hybrid_props["limit"]["description"]
    assert exact["recall"] == hybrid["recall"]
    with pytest.raises(ValueError):
        tool_definitions("fuzzy")


def test_search_and_recall(service: Obsmem, ids: list[str]) -> None:
    found = json.loads(execute_tool(service, "alpha", "memory_search", {"query": "MapToolArguments"}))
    assert found["mode"] == "exact"
    assert [hit["session_id"] for hit in found["hits"]] == ["s2", "s1", "s1"]
    as_text = execute_tool(service, "alpha", "memory_search", '{"query": "maptoolarguments", "limit": 1}')
    assert json.loads(as_text)["truncated"] is True
    hit = found["hits"][0]
    recalled = json.loads(execute_tool(service, "alpha", "recall", {"id": hit["id"], "session_id": hit["session_id"]}))
    assert recalled["memory"]["memory_id"] == hit["memory_id"]
    assert recalled["sources"][0]["content"].startswith("event for:")


def test_recall_defaults_to_the_current_session(service: Obsmem, ids: list[str]) -> None:
    display = ids[0][:12]  # the s2 note
    assert "memory" in json.loads(execute_tool(service, "alpha", "recall", {"id": display}))  # no session: project
    assert json.loads(execute_tool(service, "alpha", "recall", {"id": display}, session_id="s2"))["memory"]
    text = execute_tool(service, "alpha", "recall", {"id": display}, session_id="s1")
    assert text.startswith("not_found: ") and "session 's1'" in text
    assert "pass session_id from a memory_search hit" in text
    # An explicit session_id (from the search hit) overrides the current session.
    assert json.loads(execute_tool(service, "alpha", "recall", {"id": display, "session_id": "s2"}, session_id="s1"))


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("memory_search", "{not json", "invalid_arguments"),
        ("memory_search", "[1, 2]", "invalid_arguments"),
        ("memory_search", 42, "invalid_arguments"),
        ("memory_search", {}, "invalid_query"),
        ("memory_search", {"query": ""}, "invalid_query"),
        ("memory_search", {"query": 7}, "invalid_query"),
        ("memory_search", {"query": "x", "limit": "ten"}, "invalid_request"),
        ("memory_search", {"query": "x", "limit": 500}, "invalid_request"),
        ("memory_search", {"query": "x", "after": "2026-02-30"}, "invalid_date"),
        ("memory_search", {"query": "x", "after": "2026-02-02", "before": "2026-02-01"}, "invalid_date"),
        ("memory_search", {"query": "x", "mode": "hybrid"}, "invalid_arguments"),
        ("memory_search", {"query": "x", "session": "s1"}, "invalid_arguments"),
        ("recall", {}, "invalid_id"),
        ("recall", {"id": "xyz"}, "invalid_id"),
        ("recall", {"id": 123456789012}, "invalid_id"),
        ("recall", {"id": "ffffffffffff"}, "not_found"),
        ("recall", {"id": "ffffffffffff", "session_id": "bad id"}, "invalid_session"),
        ("recall", {"id": "ffffffffffff", "session_id": "AKIAIOSFODNN7EXAMPLE"}, "invalid_session"),
        ("memory_search", {"query": "x", "session_id": "sk-proj-Xq7Lm2Pz9Rt4Vb6Nc8Kd1Fg3Hj5"}, "invalid_session"),
        ("recall", {"memory_id": "ffffffffffff"}, "invalid_arguments"),
        ("memory_search", {"query": "x", "AKIAIOSFODNN7EXAMPLE": 1}, "invalid_arguments"),
        (
            "memory_search",
            '{"query": "x", "limit": ' + "9" * 5000 + "}",
            "invalid_arguments",
        ),  # past int()'s limit  # a name is never echoed
        ("memory", {"action": "save", "content": "x", "sk-proj-Xq7Lm2Pz9Rt4Vb6Nc8Kd1Fg3Hj5": 1}, "invalid_arguments"),
        ("delete_everything", {}, "unknown_tool"),
    ],
)
def test_model_mistakes_come_back_as_error_text(
    service: Obsmem, ids: list[str], name: str, arguments: object, code: str
) -> None:
    text = execute_tool(service, "alpha", name, arguments)  # type: ignore[arg-type]
    assert text.startswith(f"{code}: "), text
    assert "AKIAIOSFODNN7EXAMPLE" not in text and "sk-proj-" not in text  # an error never echoes a secret
    assert not run_tool(service, "alpha", name, arguments).result  # type: ignore[arg-type]


def test_null_arguments_are_treated_as_absent(service: Obsmem, ids: list[str]) -> None:
    text = execute_tool(service, "alpha", "memory_search", {"query": "gpt-4", "after": None, "limit": None})
    assert len(json.loads(text)["hits"]) == 1
    assert json.loads(execute_tool(service, "alpha", "recall", {"id": ids[0][:12], "session_id": None}))


def test_missing_or_bad_project(service: Obsmem, ids: list[str]) -> None:
    assert execute_tool(service, "nope", "memory_search", {"query": "x"}).startswith("project_not_found: ")
    assert execute_tool(service, "../etc", "memory_search", {"query": "x"}).startswith("invalid_project: ")


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_numbers_stored_before_they_were_refused_come_back_as_null(service: Obsmem) -> None:
    """Tool arguments stored by an older version may hold NaN or Infinity: the tools answer strict JSON, in
    the text for the model and in the result (MCP's structured content) alike."""
    call = {"role": "assistant", "type": "tool_call", "tool_name": "read_file", "tool_args": {"path": "a.py"}}
    service.append_events("p", "s1", [call])
    writer = apsw.Connection(str(service.projects.database_path("p")))
    writer.execute("""UPDATE events SET tool_args = '{"path": "a.py", "start": NaN, "end": Infinity}'""")
    writer.close()
    expected = {"path": "a.py", "start": None, "end": None}
    found = run_tool(service, "p", "memory_search", {"query": "a.py", "scope": "conversation"})
    assert [hit["tool_args"] for hit in strict_json(found.text)["hits"]] == [expected]
    assert found.result is not None and found.result["hits"][0]["tool_args"] == expected
    recalled = run_tool(service, "p", "recall", {"id": strict_json(found.text)["hits"][0]["id"]})
    assert strict_json(recalled.text)["event"]["tool_args"] == expected
    assert recalled.result is not None and recalled.result["event"]["tool_args"] == expected
