"""Conversation search in hybrid mode: events are chunked, embedded and indexed like memories.

Event markers are written by the append itself (durable with it), the indexer takes them when
``semantic.index.events`` is on, and hybrid hits of kind ``event`` come back with their place in the
conversation. One test runs the real bundled model; the others the loopback embedding server. The tests
that ask for ``backend_storage`` run on SQLite and on PostgreSQL (the others read SQLite's file itself).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import pytest

from obsmem import Obsmem
from obsmem.errors import ValidationFailed
from obsmem.ids import event_id
from obsmem.retrieval import SCOPES
from obsmem.settings import load_settings
from support.hybrid_reference import IN_STEP, index_matches_memories
from support.model_server import ModelServer
from support.semantic_service import add_memories, make_service, semantic_settings

TALK = [
    {"role": "user", "content": "the login test is flaky again on CI", "created_at": "2024-03-01T09:00:00Z"},
    {
        "role": "assistant",
        "type": "tool_call",
        "content": "",
        "tool_name": "run_tests",
        "tool_args": {"path": "tests/e2e/test_auth.py", "repeat": 20},
        "created_at": "2024-03-01T09:01:00Z",
    },
    {
        "role": "tool",
        "type": "tool_result",
        "content": "3 of 20 runs failed: clock skew",
        "created_at": "2024-03-01T09:02:00Z",
    },
    {
        "role": "assistant",
        "content": "mocking the clock stabilises the auth tests",
        "created_at": "2024-03-01T09:03:00Z",
    },
    {"role": "user", "content": "now upgrade postgres to version 16", "created_at": "2024-03-02T10:00:00Z"},
    {"role": "user", "content": "and prefer tabs over spaces in this repository", "created_at": "2024-03-03T11:00:00Z"},
]


def _events_on(**more: object) -> dict:  # type: ignore[type-arg]
    return {"index": {"events": True, **more}}


def _service(tmp_path: Path, server: ModelServer, storage: dict[str, Any], **overrides: Any) -> Obsmem:
    """``make_service`` on the backend ``storage`` selects (``backend_storage``)."""
    return Obsmem(load_settings(data_dir=tmp_path, semantic=semantic_settings(server, **overrides), **storage))


def test_event_hits_with_the_bundled_model(tmp_path: Path, backend_storage: dict[str, Any]) -> None:
    settings = load_settings(
        data_dir=tmp_path, semantic={"index": {"background": False, "events": True}}, **backend_storage
    )
    with Obsmem(settings) as service:
        service.append_events("app", "s1", TALK)
        service.add_observations(
            "app",
            [
                {
                    "session_id": "s1",
                    "content": "Auth e2e fixed by mocking the clock",
                    "timestamp": "2024-03-01 09:05",
                    "importance": "high",
                    "source_refs": [3, 4],
                }
            ],
        )
        report = service.index("app")
        assert report.status.indexed_count == report.status.source_count == 7 and report.status.pending == 0
        query = "why did the authentication tests fail intermittently"
        conversation = service.search("app", query, scope="conversation")
        assert conversation.mode == "hybrid" and all(hit.kind == "event" for hit in conversation.hits)
        top = conversation.hits[0]
        assert (top.session_id, top.seq) in {("s1", 1), ("s1", 3), ("s1", 4)}
        body = top.to_dict()
        assert body["event_id"] == event_id("s1", top.seq) and body["date"].startswith("2024-03-01 09:0")  # type: ignore[arg-type]
        assert {"session_id", "seq", "role", "type", "date"} <= set(body)
        # A tool call is found by its arguments.
        by_args = service.search("app", "tests/e2e/test_auth.py", scope="conversation")
        assert by_args.hits[0].seq == 2 and by_args.hits[0].tool_args == {
            "path": "tests/e2e/test_auth.py",
            "repeat": 20,
        }
        # Memories stay the default; all mixes both kinds.
        assert [hit.kind for hit in service.search("app", query).hits] == ["observation"]
        mixed = service.search("app", query, scope="all")
        assert {hit.kind for hit in mixed.hits} == {"event", "observation"}
        assert len(mixed.hits) == 7


def test_events_are_marked_by_the_indexer_up_to_a_durable_watermark(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server, **_events_on()) as service:
        service.append_events("p", "s1", TALK[:2])
        db = service.database("p")
        # The append wrote no marker; the new events still count as pending and make search partial.
        assert db.query("SELECT count(*) FROM semantic_pending")[0][0] == 0
        assert service.indexer.project("p").pending_count() == 2
        service.index("p")
        path = db.path
    # A fresh connection sees the watermark the batch committed: every event marked, then indexed.
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    through = conn.execute("SELECT marked_through FROM event_marker_progress").fetchone()[0]
    assert through == conn.execute("SELECT max(id) FROM events").fetchone()[0]
    assert conn.execute("SELECT count(*) FROM semantic_pending").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM semantic_sources WHERE memory_row < 0").fetchone()[0] == 2
    conn.close()
    with make_service(tmp_path, model_server, **_events_on()) as service:
        db = service.database("p")
        # A reused id (the deleted last event's) is at or below the watermark: its insert marks it at once.
        last = db.query("SELECT max(id) FROM events")[0][0]
        with db.write() as conn:
            conn.execute("DELETE FROM events WHERE id = ?", (last,))
        service.index("p")
        service.append_events("p", "s1", [TALK[1]])
        reused = db.query("SELECT max(id) FROM events")[0][0]
        assert reused == last == db.query("SELECT marked_through FROM event_marker_progress")[0][0]
        assert [row[0] for row in db.query("SELECT memory_row FROM semantic_pending")] == [-reused]


def test_events_stay_unmarked_while_events_are_not_indexed(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    with _service(tmp_path, model_server, backend_storage) as service:
        service.append_events("p", "s1", TALK[:2])
        service.index("p")
        db = service.database("p")
        assert db.query("SELECT count(*) FROM semantic_pending")[0][0] == 0
        assert db.query("SELECT marked_through FROM event_marker_progress")[0][0] == 0
        assert service.indexer.project("p").pending_count() == 0
    # Turned on later, the indexer marks and indexes the events stored before.
    with _service(tmp_path, model_server, backend_storage, **_events_on()) as service:
        report = service.index("p")
        assert (report.status.indexed_count, report.status.pending) == (2, 0)


def test_background_discovery_ignores_event_markers_while_events_are_not_indexed(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    # Indexed once with events on, then run with them off: an event deleted by hand leaves a marker that no
    # batch consumes while events are off, so it must not make the project look like work at every poll.
    with _service(tmp_path, model_server, backend_storage, **_events_on()) as service:
        service.append_events("p", "s1", TALK[:3])
        service.index("p")
    with _service(tmp_path, model_server, backend_storage) as service:
        db = service.database("p")
        with db.write() as conn:
            conn.execute("DELETE FROM events WHERE id = (SELECT max(id) FROM events)")
        assert db.query("SELECT count(*) FROM semantic_pending WHERE memory_row < 0")[0][0] == 1
        assert service.indexer._discover() == []
        add_memories(service, "p", [("2025-03-01 10:00", "a memory waiting to be indexed")])
        assert service.indexer._discover() == ["p"]


def test_index_follows_appends_deletes_and_rebuilds(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    with _service(tmp_path, model_server, backend_storage, **_events_on()) as service:
        service.append_events("p", "s1", TALK)
        add_memories(service, "p", [("2024-03-04 08:00", "release candidate 2.3 cut on friday")], session="s2")
        first = service.index("p")
        # 6 + 1 events (add_memories appends one) and one memory.
        assert (first.status.indexed_count, first.status.source_count, first.status.pending) == (8, 8, 0)
        db = service.database("p")
        labels = db.query("SELECT count(*) FROM semantic_chunks WHERE memory_row < 0")[0][0]
        assert labels == 7
        hits = service.search("p", "postgres upgrade", scope="conversation").hits
        assert hits[0].seq == 5
        # An event deleted (say by a retention job) leaves search at once and the index at the next batch.
        with db.write() as conn:
            conn.execute("DELETE FROM events WHERE session_id = 's1' AND seq = 5")
        result = service.search("p", "postgres upgrade", scope="conversation")
        assert 5 not in [hit.seq for hit in result.hits if hit.session_id == "s1"] and result.partial
        service.index("p")
        assert db.query("SELECT count(*) FROM semantic_chunks WHERE memory_row < 0")[0][0] == 6
        if not backend_storage:  # the reference rebuilds SQLite's own tables
            with db.read() as conn:
                assert index_matches_memories(conn, service.settings.semantic)["pending"] == IN_STEP["pending"]
    # Other chunk settings: everything, events included, is rebuilt from the canonical rows.
    with _service(tmp_path, model_server, backend_storage, chunk_bytes=600, **_events_on()) as service:
        rebuilt = service.index("p")
        assert rebuilt.totals.reset and rebuilt.status.indexed_count == 7
        assert service.search("p", "tabs over spaces", scope="conversation").hits[0].seq == 6


def test_keyword_documents_of_events_carry_their_neighbours(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    with _service(tmp_path, model_server, backend_storage, **_events_on()) as service:
        service.append_events("p", "s1", TALK[:4])
        service.index("p")
        db = service.database("p")
        context = dict(
            (
                (row, (previous, following))
                for row, previous, following in db.query(
                    "SELECT memory_row, previous_row, next_row FROM semantic_context WHERE memory_row < 0"
                )
            )
        )
        ids = [row[0] for row in db.query("SELECT id FROM events ORDER BY seq")]
        assert context[-ids[1]] == (-ids[0], -ids[2])
        assert context[-ids[0]] == (None, -ids[1]) and context[-ids[3]] == (-ids[2], None)
        # An event appended later becomes the last one's next neighbour.
        service.append_events("p", "s1", TALK[4:5])
        service.index("p")
        after = db.query("SELECT next_row FROM semantic_context WHERE memory_row = ?", (-ids[3],))[0][0]
        assert after == -db.query("SELECT id FROM events WHERE seq = 5")[0][0]


def test_events_wait_until_the_setting_is_on(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    with _service(tmp_path, model_server, backend_storage) as service:
        add_memories(service, "p", [("2024-03-01 09:00", "mocked the clock in auth e2e")])
        service.append_events("p", "s1", TALK)
        report = service.index("p")
        assert (report.status.indexed_count, report.status.source_count, report.status.pending) == (1, 1, 0)
        assert service.search("p", "clock").partial is False
        with pytest.raises(ValidationFailed) as caught:
            service.search("p", "clock", scope="conversation")
        assert caught.value.code == "mode_unavailable" and "semantic.index.events" in caught.value.message
        # Exact conversation search needs no index.
        assert service.search("p", "clock", scope="conversation", mode="exact").hits
    with _service(tmp_path, model_server, backend_storage, **_events_on()) as service:
        status = service.status("p").to_dict()
        assert json.dumps(status)  # plain JSON
        report = service.index("p")
        assert report.totals.memories == 7 and report.status.indexed_count == 8
        assert service.search("p", "postgres version", scope="conversation").hits[0].seq == 6


def test_partial_answers_for_the_kind_the_scope_searches(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    with _service(tmp_path, model_server, backend_storage, **_events_on()) as service:
        add_memories(service, "p", [("2024-03-01 09:00", "mocked the clock in auth e2e")])
        service.append_events("p", "s1", TALK[:3])
        service.index("p")
        partial = {scope: service.search("p", "clock", scope=scope).partial for scope in SCOPES}
        assert partial == {"memories": False, "conversation": False, "all": False}
        # New events wait for the indexer: only the searches that look at events are partial.
        service.append_events("p", "s1", TALK[3:])
        partial = {scope: service.search("p", "clock", scope=scope).partial for scope in SCOPES}
        assert partial == {"memories": False, "conversation": True, "all": True}
        service.index("p")
        # A new memory waits: only the searches that look at memories are partial.
        add_memories(service, "p", [("2024-03-02 09:00", "postgres 16 upgrade planned")], session="s9")
        with service.database("p").write() as conn:
            conn.execute("UPDATE event_marker_progress SET marked_through = (SELECT max(id) FROM events)")
        partial = {scope: service.search("p", "clock", scope=scope).partial for scope in SCOPES}
        assert partial == {"memories": True, "conversation": False, "all": True}


def test_counting_indexed_events_derives_no_event_id(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server, **_events_on()) as service:
        service.append_events("p", "s1", TALK)
        service.index("p")
        db = service.database("p")
        calls = [0]

        def counted(session_id: str, seq: int) -> str:
            calls[0] += 1
            return event_id(session_id, seq)

        db.connection().create_scalar_function("obsmem_event_id", counted, 2, deterministic=True)
        status = service.status("p")
        assert (status.indexed_count, status.source_count) == (6, 6) and calls[0] == 0
        # An edited event is pending: its id is checked (the one it was indexed under still holds).
        with db.write() as conn:
            conn.execute("UPDATE events SET content = 'edited' WHERE seq = 2")
        assert service.status("p").indexed_count == 6 and calls[0] == 1
        # A deleted event's row is gone; the next append reuses its row for another event, not indexed yet.
        with db.write() as conn:
            conn.execute("DELETE FROM events WHERE seq = 6")
        assert service.status("p").indexed_count == 5
        service.append_events("p", "s1", [{"seq": 7, "role": "user", "content": "another last word"}])
        assert db.query("SELECT max(id) FROM events") == [(6,)] and service.status("p").indexed_count == 5
        service.index("p")
        assert service.status("p").indexed_count == 6


def test_the_keyword_rebuild_reads_no_event_while_events_are_not_indexed(
    tmp_path: Path, model_server: ModelServer
) -> None:
    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", [("2024-03-01 09:00", "mocked the clock in auth e2e")])
        service.append_events("p", "s1", TALK)
        service.index("p")
        index = service.indexer.project("p")  # type: ignore[union-attr]
        conn = service.database("p").connection()
        statements: list[str] = []

        def traced(cursor: apsw.Cursor, sql: str, bindings: object) -> bool:
            statements.append(sql)
            return True

        conn.exec_trace = traced
        with service.database("p").write() as writer:
            index.keywords.create(writer)
        conn.exec_trace = None
        assert statements and not [sql for sql in statements if "FROM events AS e LEFT JOIN" in sql]
    # With events indexed, their keyword rows are rebuilt from them as before.
    with make_service(tmp_path, model_server, **_events_on()) as service:
        service.index("p")
        db = service.database("p")
        with db.write() as writer:
            service.indexer.project("p").keywords.create(writer)  # type: ignore[union-attr]
        assert db.query("SELECT count(*) FROM semantic_context WHERE memory_row < 0")[0][0] == len(TALK) + 1
