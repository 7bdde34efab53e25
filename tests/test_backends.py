"""The same operations, the same answers, on both storage backends: SQLite files and PostgreSQL.

Every test here runs twice (``backend`` is ``sqlite`` or ``postgres``) through ``Obsmem``, so what the
PostgreSQL backend supports is held to the SQLite behaviour by the same assertions.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from obsmem.errors import InvalidId, InvalidQuery, NotFound, ProjectNotFound, SeqConflict
from obsmem.ids import event_id
from obsmem.settings import load_settings


@pytest.fixture(params=["sqlite", "postgres"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Obsmem]:
    options: dict = {}
    if request.param == "postgres":
        options["storage"] = {"backend": "postgres", "dsn": request.getfixturevalue("postgres_dsn")}
    with Obsmem(load_settings(data_dir=tmp_path / "data", **options)) as service:
        assert (type(service).__name__ == "PostgresObsmem") == (request.param == "postgres")
        yield service


def _message(text: str, seq: int | None = None) -> dict:
    event: dict = {"role": "user", "content": text}
    if seq is not None:
        event["seq"] = seq
    return event


def _observation(content: str, timestamp: str, session: str = "s1", refs: list | None = None) -> dict:
    return {
        "session_id": session,
        "timestamp": timestamp,
        "content": content,
        "importance": "medium",
        "source_refs": refs or [1],
    }


def test_appends_are_idempotent_per_seq_and_count_the_session(memory: Obsmem) -> None:
    first = memory.append_events("p", "s1", [_message("a"), _message("b"), _message("c")])
    assert first.to_dict() == {"appended": 3, "duplicates": 0, "last_seq": 3}
    again = memory.append_events("p", "s1", [_message("b", 2), _message("d", 5)])
    assert again.to_dict() == {"appended": 1, "duplicates": 1, "last_seq": 5}
    with pytest.raises(SeqConflict):
        memory.append_events("p", "s1", [_message("new", 6), _message("not b", 2)])
    memory.append_events("p", "s2", [_message("x")])
    status = memory.status("p")
    assert (status.sessions, status.events, status.observations) == (2, 5, 0)  # the conflicting batch left nothing
    assert status.last_activity is not None and memory.project_names() == ["p"]


def test_reads_never_create_a_project(memory: Obsmem) -> None:
    with pytest.raises(ProjectNotFound):
        memory.status("ghost")
    with pytest.raises(ProjectNotFound):
        memory.search("ghost", "x")
    receipt = memory.add_observations("ghost", [_observation("nothing to cite", "2026-01-01 10:00")])
    assert [item.code for item in receipt.rejected] == ["session_not_found"]
    assert memory.project_names() == []


def test_observations_are_written_once_checked_against_their_sources_and_forgotten(memory: Obsmem) -> None:
    memory.append_events("p", "s1", [_message("deploy"), _message("rollback")])
    items = [
        _observation("Deployed the MapTool fix", "2026-03-01 09:00", refs=[1]),
        _observation("Rolled back the MapTool fix", "2026-03-02 10:00", refs=[1, 2]),
        _observation("cites a missing event", "2026-03-02 11:00", refs=[9]),
        _observation("unknown session", "2026-03-02 11:00", session="nope"),
    ]
    receipt = memory.add_observations("p", items)
    assert [item.index for item in receipt.added] == [0, 1]
    assert [(item.index, item.code) for item in receipt.rejected] == [
        (2, "unknown_source_ref"),
        (3, "session_not_found"),
    ]
    duplicate = memory.add_observations("p", items[:1])
    assert [item.memory_id for item in duplicate.duplicates] == [receipt.added[0].memory_id]
    assert memory.status("p").observations == 2

    recollection = memory.recall("p", receipt.added[1].id)
    assert recollection.memory.content == "Rolled back the MapTool fix"
    assert [(source.session_id, source.seq) for source in recollection.sources] == [("s1", 1), ("s1", 2)]

    forgotten = memory.forget("p", receipt.added[0].id)
    assert forgotten.deleted.content == "Deployed the MapTool fix"
    assert memory.status("p").observations == 1
    with pytest.raises(NotFound):
        memory.recall("p", receipt.added[0].id)
    assert [hit.content for hit in memory.search("p", "maptool").hits] == ["Rolled back the MapTool fix"]


def test_recall_finds_an_event_by_its_id_with_its_neighbours(memory: Obsmem) -> None:
    memory.append_events("p", "s1", [_message(f"turn {n}") for n in range(1, 8)])
    memory.add_observations("p", [_observation("turn four matters", "2026-03-01 09:00", refs=[4])])
    recalled = memory.recall("p", event_id("s1", 4)[:12])
    assert recalled.event.content == "turn 4"
    assert [event.seq for event in recalled.before] == [1, 2, 3]
    assert [event.seq for event in recalled.after] == [5, 6, 7]
    assert [hit.content for hit in recalled.cited_by] == ["turn four matters"]


def test_recall_of_an_unknown_or_malformed_id_says_so(memory: Obsmem) -> None:
    memory.append_events("p", "s1", [_message("x")])
    memory.add_observations("p", [_observation("a note", "2026-03-01 09:00")])
    with pytest.raises(NotFound):
        memory.recall("p", "f" * 12)
    with pytest.raises(InvalidId):
        memory.recall("p", "not-hex")


@pytest.fixture
def dated(memory: Obsmem) -> Obsmem:
    memory.append_events("p", "s1", [_message("x") for _ in range(3)])
    memory.append_events("p", "s2", [_message("x")])
    items = [
        _observation("deploy MapToolArguments fix", "2026-03-01 09:00"),
        _observation("MapToolArguments regression found", "2026-03-01 23:59"),
        _observation("reverted maptoolarguments change", "2026-03-02 00:00"),
        _observation("MapToolArguments v2 shipped, ticket #2510", "2026-03-05 12:30", session="s2"),
        _observation("50% of runs use snake_case names", "2026-03-06 08:00"),
        _observation("50 runs of snakeXcase, Café notes", "2026-03-06 09:00"),
    ]
    assert len(memory.add_observations("p", items).added) == len(items)
    return memory


def _contents(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [hit.content for hit in result.hits]


def test_exact_search_is_newest_first_and_ascii_case_insensitive(dated: Obsmem) -> None:
    assert _contents(dated.search("p", "MAPTOOLarguments")) == [
        "MapToolArguments v2 shipped, ticket #2510",
        "reverted maptoolarguments change",
        "MapToolArguments regression found",
        "deploy MapToolArguments fix",
    ]
    assert _contents(dated.search("p", "CAFé")) == ["50 runs of snakeXcase, Café notes"]
    assert _contents(dated.search("p", "cafÉ")) == []  # only ASCII letters fold


def test_exact_search_takes_percent_and_underscore_literally(dated: Obsmem) -> None:
    assert _contents(dated.search("p", "50%")) == ["50% of runs use snake_case names"]
    assert _contents(dated.search("p", "snake_case")) == ["50% of runs use snake_case names"]
    assert _contents(dated.search("p", "%")) == ["50% of runs use snake_case names"]
    assert _contents(dated.search("p", "\\")) == []


def test_exact_search_limit_truncated_dates_and_session(dated: Obsmem) -> None:
    result = dated.search("p", "maptoolarguments", limit=2)
    assert len(result.hits) == 2 and result.truncated
    assert not dated.search("p", "maptoolarguments", limit=4).truncated
    window = dated.search("p", "maptoolarguments", after="2026-03-01", before="2026-03-01")
    assert _contents(window) == ["MapToolArguments regression found", "deploy MapToolArguments fix"]
    minute = dated.search("p", "maptoolarguments", before="2026-03-01 23:59")
    assert len(minute.hits) == 2
    assert _contents(dated.search("p", "MapTool", session_id="s2")) == ["MapToolArguments v2 shipped, ticket #2510"]
    assert _contents(dated.search("p", "#2")) == ["MapToolArguments v2 shipped, ticket #2510"]


def test_exact_search_refuses_bad_queries_alike(dated: Obsmem) -> None:
    for query in ("", "   ", "a\x00b", "x" * 1001):
        with pytest.raises(InvalidQuery):
            dated.search("p", query)


def test_conversation_search_matches_event_content_and_arguments_newest_first(memory: Obsmem) -> None:
    memory.append_events(
        "p",
        "s1",
        [
            {"role": "user", "content": "please run the MapTool migration"},
            {"role": "assistant", "type": "tool_call", "tool_name": "shell", "tool_args": {"cmd": "maptool --up"}},
            {"role": "tool", "type": "tool_result", "content": "done: 50% migrated", "tool_call_id": "c1"},
        ],
    )
    memory.add_observations("p", [_observation("MAPTOOL migration started", "2026-03-01 09:00", refs=[1])])
    conversation = memory.search("p", "maptool", scope="conversation")
    assert [(hit.kind, hit.seq) for hit in conversation.hits] == [("event", 2), ("event", 1)]
    assert conversation.hits[0].tool_args == {"cmd": "maptool --up"}
    assert conversation.hits[0].memory_id == event_id("s1", 2)
    both = memory.search("p", "maptool", scope="all", limit=2)
    assert [(hit.kind, hit.seq) for hit in both.hits] == [("event", 2), ("event", 1)] and both.truncated
    assert [hit.kind for hit in memory.search("p", "maptool", scope="all").hits] == ["event", "event", "observation"]
    assert [hit.seq for hit in memory.search("p", "50%", scope="conversation").hits] == [3]
    assert memory.search("p", "maptool", scope="conversation", before="2026-01-01").hits == []
