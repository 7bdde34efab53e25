"""Recall: unique prefixes, provenance, and errors that tell the caller what to do."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.errors import AmbiguousId, InvalidId, NotFound, ProjectNotFound
from obsmem.retrieval import Hit, RecalledMemory, RecallParts, SourceEvent, SourceRef, recall_memory


@pytest.fixture
def stored(service: Obsmem) -> tuple[Obsmem, str]:
    service.append_events(
        "p",
        "s1",
        [
            {"role": "user", "content": "please bump httpx"},
            {
                "role": "assistant",
                "type": "tool_call",
                "tool_name": "bash",
                "tool_args": {"cmd": "pip install -U httpx"},
            },
            {
                "role": "tool",
                "type": "tool_result",
                "tool_name": "bash",
                "content": "Successfully installed httpx-0.28.1",
            },
        ],
    )
    receipt = service.add_observations(
        "p",
        [
            {
                "session_id": "s1",
                "timestamp": "2026-04-01 10:00",
                "content": "Upgraded httpx to 0.28.1 at user request",
                "importance": "medium",
                "source_refs": [1, 2, 3],
            }
        ],
    )
    return service, receipt.added[0].memory_id


def test_recall_by_display_id_returns_sources_in_order(stored: tuple[Obsmem, str]) -> None:
    service, memory_id = stored
    result = service.recall("p", memory_id[:12])
    assert result.memory.memory_id == memory_id
    assert [(e.seq, e.role, e.type) for e in result.sources] == [
        (1, "user", "message"),
        (2, "assistant", "tool_call"),
        (3, "tool", "tool_result"),
    ]
    assert result.sources[1].tool_args == {"cmd": "pip install -U httpx"}
    assert result.supporting == ()
    assert service.recall("p", memory_id).memory.id == memory_id[:12]


def test_unknown_id_names_the_session_and_says_what_to_pass(stored: tuple[Obsmem, str]) -> None:
    service, memory_id = stored
    with pytest.raises(NotFound) as caught:
        service.recall("p", memory_id[:12], session_id="other")
    assert "session 'other'" in caught.value.message and "session_id" in caught.value.message
    with pytest.raises(NotFound):
        service.recall("p", "0" * 12 if not memory_id.startswith("0" * 12) else "f" * 12)


def test_ambiguous_prefix(stored: tuple[Obsmem, str]) -> None:
    service, _ = stored
    db = service.database("p")
    with db.write() as conn:
        for suffix in ("1", "2"):
            conn.execute(
                "INSERT INTO memories(memory_id, kind, session_id, content, date, importance, created_at)"
                " VALUES (?, 'observation', 's1', 'x', '2026-01-01 00:00:00', 'low', 'x')",
                ("abcdefabcdef" + suffix * 52,),
            )
    with pytest.raises(AmbiguousId):
        service.recall("p", "abcdefabcdef")
    assert service.recall("p", "abcdefabcdef1").memory.content == "x"


def test_reflection_recall_lists_supporting_observations(stored: tuple[Obsmem, str]) -> None:
    from obsmem.memories import ReflectionIn, add_reflection

    service, memory_id = stored
    db = service.database("p")
    with db.write() as conn:
        reflection_id, added = add_reflection(conn, ReflectionIn("s1", "Dependencies are kept current", (memory_id,)))
    assert added
    result = service.recall("p", reflection_id[:16])
    assert result.memory.kind == "reflection" and "importance" not in result.memory.to_dict()
    assert [item.memory_id for item in result.supporting] == [memory_id]
    assert result.sources == ()
    assert [hit.kind for hit in service.search("p", "dependencies are").hits] == ["reflection"]


def test_malformed_id_and_unknown_project(stored: tuple[Obsmem, str]) -> None:
    service, _ = stored
    with pytest.raises(InvalidId):
        service.recall("p", "XYZ")
    with pytest.raises(ProjectNotFound):
        service.recall("missing", "a" * 12)
    assert not service.projects.exists("missing")


_HEX = "0123456789abcdef"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # few distinct characters, so that ids share long prefixes and prefixes are often ambiguous
    stems=st.lists(st.text(alphabet="0f", min_size=14, max_size=14), min_size=1, max_size=6, unique=True),
    data=st.data(),
)
def test_a_prefix_resolves_exactly_as_a_scan_of_the_ids_would(  # type: ignore[no-untyped-def]
    tmp_path_factory: pytest.TempPathFactory, stems: list[str], data
) -> None:
    memory_ids = [stem + _HEX[n % 16] * 50 for n, stem in enumerate(stems)]
    source = data.draw(st.sampled_from(memory_ids))
    of_an_id = st.integers(12, 64).map(lambda n: source[:n])
    prefix = data.draw(st.one_of(of_an_id, st.text(_HEX, min_size=12, max_size=64)))
    with Obsmem(data_dir=tmp_path_factory.mktemp("data")) as service:
        service.append_events("p", "s1", [{"role": "user", "content": "x"}])
        with service.database("p").write() as conn:
            conn.executemany(
                "INSERT INTO memories(memory_id, kind, session_id, content, date, importance, created_at)"
                " VALUES (?, 'observation', 's1', 'x', '2026-01-01 00:00:00', 'low', 'x')",
                [(memory_id,) for memory_id in memory_ids],
            )
        matching = [memory_id for memory_id in memory_ids if memory_id.startswith(prefix)]
        if len(matching) == 1:
            assert service.recall("p", prefix).memory.memory_id == matching[0]
        else:
            with pytest.raises(AmbiguousId if matching else NotFound):
                service.recall("p", prefix)


def test_recall_returns_typed_parts_and_the_same_json_document(stored: tuple[Obsmem, str]) -> None:
    from obsmem.memories import ReflectionIn, add_reflection

    service, memory_id = stored
    db = service.database("p")
    with db.read() as conn:
        parts = recall_memory(conn, memory_id[:12], session_id=None, project="p")
    assert isinstance(parts, RecallParts) and isinstance(parts.memory, RecalledMemory)
    assert all(isinstance(event, SourceEvent) for event in parts.sources) and parts.supporting == ()
    assert parts.memory.source_refs == (SourceRef("s1", 1), SourceRef("s1", 2), SourceRef("s1", 3))
    result = service.recall("p", memory_id[:12])
    assert (result.memory, result.sources, result.supporting) == tuple(parts)  # wrapped, never rebuilt
    stamps = [event.created_at for event in result.sources]
    # Key order and optional keys are part of what every surface publishes.
    assert json.dumps(result.to_dict()) == json.dumps(
        {
            "memory": {
                "id": memory_id[:12],
                "memory_id": memory_id,
                "kind": "observation",
                "session_id": "s1",
                "date": "2026-04-01 10:00",
                "importance": "medium",
                "content": "Upgraded httpx to 0.28.1 at user request",
                "created_at": result.memory.created_at,
                "source_refs": [{"session_id": "s1", "seq": seq} for seq in (1, 2, 3)],
            },
            "sources": [
                {
                    "session_id": "s1",
                    "seq": 1,
                    "role": "user",
                    "type": "message",
                    "content": "please bump httpx",
                    "created_at": stamps[0],
                },
                {
                    "session_id": "s1",
                    "seq": 2,
                    "role": "assistant",
                    "type": "tool_call",
                    "content": result.sources[1].content,
                    "tool_name": "bash",
                    "tool_args": {"cmd": "pip install -U httpx"},
                    "created_at": stamps[1],
                },
                {
                    "session_id": "s1",
                    "seq": 3,
                    "role": "tool",
                    "type": "tool_result",
                    "content": "Successfully installed httpx-0.28.1",
                    "tool_name": "bash",
                    "created_at": stamps[2],
                },
            ],
            "supporting": [],
        }
    )
    with db.write() as conn:
        reflection_id, _ = add_reflection(conn, ReflectionIn("s1", "Dependencies are kept current", (memory_id,)))
    reflected = service.recall("p", reflection_id)
    assert all(isinstance(item, Hit) for item in reflected.supporting)
    body = reflected.to_dict()
    assert list(body["memory"]) == [
        "id",
        "memory_id",
        "kind",
        "session_id",
        "date",
        "content",
        "created_at",
        "supporting_observation_ids",
    ]
    assert body["memory"]["supporting_observation_ids"] == [memory_id]
    assert body["sources"] == []
    assert body["supporting"][0]["memory_id"] == memory_id and list(body["supporting"][0]) == [
        "id",
        "memory_id",
        "kind",
        "session_id",
        "date",
        "importance",
        "content",
    ]
