"""Hybrid search of conversation events on PostgreSQL, held to the SQLite backend's answers.

The same events (and memories) go into a SQLite service and a PostgreSQL service with
``semantic.index.events`` on (embeddings from the loopback model server: hashed bags of words,
deterministic); their hybrid searches of every scope must agree, with and without date and session filters.
The events are marked from the durable watermark, safely while several services append and index at once;
a rebuild and a move between backends treat the index as derived. The service with events indexed starts
on PostgreSQL (it was refused before) and answers through the Python API and HTTP alike.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from obsmem.app import Obsmem
from obsmem.app.migrate import migrate_project
from obsmem.ids import event_id
from obsmem.retrieval import SCOPES
from obsmem.settings import load_settings
from obsmem.surfaces.cli import cli
from obsmem.surfaces.http import create_app
from support.model_server import ModelServer
from support.semantic_service import VOCABULARY, add_memories, service_on, sqlite_and_postgres

LOCAL = "http://127.0.0.1"
EVENTS_ON = {"index": {"events": True}}


def _service(data_dir: Path, server: ModelServer, dsn: str | None, **overrides: Any) -> Obsmem:
    return service_on(data_dir, server, dsn, **{**EVENTS_ON, **overrides})


@pytest.fixture
def both(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> Iterator[tuple[Obsmem, Obsmem]]:
    with sqlite_and_postgres(tmp_path, model_server, postgres_dsn, **EVENTS_ON) as pair:
        yield pair


def _conversation(count: int, seed: int = 5) -> list[tuple[str, dict[str, Any]]]:
    """``count`` events of random coding words over three sessions, one every few hours from 2025-01-01;
    every fifth a tool call whose arguments hold words too."""
    rng = random.Random(seed)
    events = []
    for i in range(count):
        words = " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(3, 12)))
        stamp = f"2025-{1 + (i // 112) % 12:02d}-{1 + (i // 4) % 28:02d}T{(i % 4) * 5 + 1:02d}:{i % 60:02d}:00Z"
        event: dict[str, Any] = {"role": "user" if i % 2 else "assistant", "content": words, "created_at": stamp}
        if i % 5 == 4:
            event.update(
                role="assistant",
                type="tool_call",
                tool_name="run",
                tool_args={"cmd": " ".join(rng.choice(VOCABULARY) for _ in range(3))},
            )
        events.append((f"s{i % 3}", event))
    return events


def _fill(service: Obsmem, events: list[tuple[str, dict[str, Any]]]) -> None:
    for session in ("s0", "s1", "s2"):
        service.append_events("p", session, [event for owner, event in events if owner == session])
    add_memories(
        service,
        "p",
        [("2025-01-03 10:00", "flaky login test fixed by mocking the clock"), ("2025-02-10 09:00", "deploy cache")],
        session="m1",
    )
    service.index("p")


def _ids(result: Any) -> list[str]:
    return [hit.memory_id for hit in result.hits]


def test_conversation_hybrid_answers_as_on_sqlite(both: tuple[Obsmem, Obsmem]) -> None:
    sqlite, postgres = both
    events = _conversation(150)
    _fill(sqlite, events)
    _fill(postgres, events)
    lite_status, pg_status = sqlite.status("p"), postgres.status("p")
    # 150 events, 2 more appended for the memories' sources, and 2 memories: all indexed on both.
    assert (pg_status.indexed_count, pg_status.source_count) == (154, 154)
    assert (lite_status.indexed_count, lite_status.source_count) == (154, 154)
    assert pg_status.index is not None and pg_status.index.pending == 0 and pg_status.index.chunks == 154
    rng = random.Random(3)
    filters: list[dict[str, str]] = [
        {},
        {"after": "2025-01-05", "before": "2025-01-12"},
        {"session_id": "s1"},
        {"after": "2025-02-01", "session_id": "s2"},
    ]
    compared = agreeing = 0
    for scope in SCOPES:
        for case in filters:
            for _ in range(5):
                query = " ".join(rng.choice(VOCABULARY) for _ in range(3))
                lite = sqlite.search("p", query, mode="hybrid", scope=scope, limit=10, **case)
                pg = postgres.search("p", query, mode="hybrid", scope=scope, limit=10, **case)
                assert pg.mode == "hybrid" and not pg.partial and len(pg.hits) == len(lite.hits), (scope, case)
                assert [hit.kind for hit in pg.hits] == [hit.kind for hit in lite.hits]
                if lite.hits:
                    # The same candidates and the same fusion: the same best hit, and the same hits near the
                    # top (where float rounding of equal scores may swap neighbours).
                    assert _ids(pg)[0] == _ids(lite)[0], (scope, case, query)
                    assert len(set(_ids(pg)[:5]) & set(_ids(lite)[:5])) >= min(4, len(lite.hits))
                compared += 1
                agreeing += _ids(pg) == _ids(lite)
    assert agreeing >= compared * 0.9
    # An event hit carries its place in the conversation, as on SQLite.
    tool = postgres.search("p", "run " + events[4][1]["tool_args"]["cmd"], scope="conversation").hits[0]
    lite_tool = sqlite.search("p", "run " + events[4][1]["tool_args"]["cmd"], scope="conversation").hits[0]
    assert tool.to_dict() == lite_tool.to_dict()
    assert tool.kind == "event" and tool.memory_id == event_id(tool.session_id, tool.seq)  # type: ignore[arg-type]


def test_date_windows_of_events_lose_nothing_and_rank_as_on_sqlite(both: tuple[Obsmem, Obsmem]) -> None:
    # A window is read first and every chunk in it scored exactly (up to exact_scan_max_chunks), so a window
    # holding no more events than the limit returns every one of them, in SQLite's order.
    sqlite, postgres = both
    events = _conversation(200, seed=13)
    _fill(sqlite, events)
    _fill(postgres, events)
    stamps = {f"{session}:{seq}": event["created_at"] for session, seq, event in _numbered(events)}
    days = st.integers(min_value=0, max_value=60)

    @hyp_settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        start=days,
        length=st.integers(min_value=0, max_value=10),
        words=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=3),
        scope=st.sampled_from(["conversation", "all"]),
    )
    def window_has_no_omissions(start: int, length: int, words: list[str], scope: str) -> None:
        first = date(2025, 1, 1) + timedelta(days=start)
        after, before = first.isoformat(), (first + timedelta(days=length)).isoformat()
        query = " ".join(words)
        pg = postgres.search("p", query, scope=scope, limit=50, after=after, before=before)
        lite = sqlite.search("p", query, scope=scope, limit=50, after=after, before=before)
        assert _ids(pg) == _ids(lite)
        inside = {key for key, stamp in stamps.items() if after <= stamp[:10] <= before}
        if len(inside) <= 50:
            found = {f"{hit.session_id}:{hit.seq}" for hit in pg.hits if hit.kind == "event"}
            assert found == inside

    window_has_no_omissions()


def _numbered(events: list[tuple[str, dict[str, Any]]]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Each event with the seq its session's append gave it."""
    seqs: dict[str, int] = {}
    for session, event in events:
        seqs[session] = seqs.get(session, 0) + 1
        yield session, seqs[session], event


def test_obsmem_index_and_search_from_the_command_line(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    config = tmp_path / "pg.toml"
    config.write_text(
        f'[storage]\nbackend = "postgres"\ndsn = "{postgres_dsn}"\n'
        "[jobs]\nin_server = false\n"
        "[semantic]\n[semantic.embedding]\n"
        f'provider = "openai"\nbase_url = "{model_server.base_url}"\nmodel_id = "hashed-words"\n'
        "[semantic.index]\nbackground = false\nevents = true\n"
    )
    with Obsmem(load_settings(config)) as service:
        service.append_events("app", "s1", [event for _, event in _conversation(12)])
    runner = CliRunner()
    base = ["--config", str(config)]
    indexed = runner.invoke(cli, [*base, "index", "app", "--json", "--no-progress"])
    assert indexed.exit_code == 0, indexed.output
    summary = json.loads(indexed.output)
    assert (summary["indexed_count"], summary["source_count"], summary["pending"]) == (12, 12, 0)
    query = _conversation(12)[7][1]["content"]
    found = runner.invoke(cli, [*base, "search", "app", query, "--scope", "conversation", "--json"])
    assert found.exit_code == 0, found.output
    result = json.loads(found.output)
    assert result["mode"] == "hybrid" and result["hits"][0]["seq"] == 8


def test_events_are_marked_from_a_durable_watermark(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    with _service(tmp_path, model_server, postgres_dsn) as service:
        service.append_events("p", "s1", [event for _, event in _conversation(6)])
        db = service.database("p")
        # The append wrote no marker; the new events still count as pending and make search partial.
        assert db.query("SELECT count(*) FROM semantic_pending") == [(0,)]
        assert service.indexer.project("p").pending_count() == 6  # type: ignore[union-attr]
        report = service.index("p")
        assert (report.status.indexed_count, report.status.pending) == (6, 0)
        assert db.query("SELECT marked_through FROM event_marker_progress") == db.query("SELECT max(id) FROM events")
        assert db.query("SELECT count(*) FROM semantic_sources WHERE memory_row < 0") == [(6,)]
        # Edits and deletes are marked by triggers in the writer's transaction; an insert at or below the
        # watermark too (an explicit id, as a restore writes).
        first, last = db.query("SELECT min(id), max(id) FROM events")[0]
        with db.write() as conn:
            conn.execute("UPDATE events SET content = 'edited words' WHERE id = ?", (first,))
            conn.execute("DELETE FROM events WHERE id = ?", (last,))
        assert sorted(row[0] for row in db.query("SELECT memory_row FROM semantic_pending")) == [-last, -first]
        service.index("p")
        with db.write() as conn:
            conn.execute(
                "INSERT INTO events(id, session_id, seq, role, type, content, created_at, fingerprint)"
                " VALUES (?, 's1', 99, 'user', 'message', 'zebra quagga okapi', '2025-03-01T10:00:00.000Z', 'f')",
                (last,),
            )
        assert db.query("SELECT memory_row FROM semantic_pending") == [(-last,)]
        service.index("p")
        hit = service.search("p", "zebra quagga okapi", scope="conversation").hits[0]
        assert (hit.seq, hit.content) == (99, "zebra quagga okapi")
        assert service.search("p", "edited words", scope="conversation").hits[0].content == "edited words"


def test_concurrent_appends_and_indexers_lose_no_event(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    # Two services (two pools, as two servers) append while both index in loops: every event is marked once
    # by some batch, whichever service's transaction moved the watermark.
    small = {"index": {"events": True, "batch_chunks": 8}}
    with (
        _service(tmp_path / "a", model_server, postgres_dsn, **small) as first,
        _service(tmp_path / "b", model_server, postgres_dsn, **small) as second,
    ):
        first.append_events("p", "s0", [{"role": "user", "content": "start"}])
        stop = threading.Event()
        failures: list[BaseException] = []

        def append(service: Obsmem, session: str) -> None:
            try:
                for round_ in range(15):
                    batch = [{"role": "user", "content": f"{session} round {round_} item {i}"} for i in range(4)]
                    service.append_events("p", session, batch)
            except BaseException as error:  # reported by the test below
                failures.append(error)

        def index(service: Obsmem) -> None:
            try:
                while not stop.is_set():
                    service.indexer.run_batch("p")  # type: ignore[union-attr]
            except BaseException as error:
                failures.append(error)

        writers = [threading.Thread(target=append, args=(svc, f"w{i}")) for i, svc in enumerate((first, second) * 2)]
        indexers = [threading.Thread(target=index, args=(svc,)) for svc in (first, second)]
        for thread in writers + indexers:
            thread.start()
        for thread in writers:
            thread.join(timeout=120)
        stop.set()
        for thread in indexers:
            thread.join(timeout=120)
        assert not failures, failures
        assert not any(thread.is_alive() for thread in writers + indexers)
        report = second.index("p")
        total = 1 + 4 * 15 * 4
        assert (report.status.indexed_count, report.status.source_count, report.status.pending) == (total, total, 0)
        db = first.database("p")
        assert db.query("SELECT count(*) FROM semantic_sources WHERE memory_row < 0") == [(total,)]
        assert db.query(
            "SELECT count(*) FROM events AS e WHERE NOT EXISTS (SELECT 1 FROM semantic_sources AS s"
            " WHERE s.memory_row = -e.id)"
        ) == [(0,)]


def test_an_explicit_id_written_while_events_are_marked_is_indexed(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    # The race the marking lock exists for: an event with an explicit id (as a restore writes) lands above the
    # watermark but below events already committed, in a transaction still open while a batch marks. Without
    # the writer lock around the marking, the watermark would pass the open event and it would never be indexed.
    with _service(tmp_path / "pg", model_server, postgres_dsn) as service:
        service.append_events("p", "s1", [{"role": "user", "content": f"early {i}"} for i in range(10)])
        service.index("p")
        service.append_events("p", "s1", [{"role": "user", "content": f"later {i}"} for i in range(10)])
        db = service.database("p")
        gap = db.query("SELECT min(id) + 4 FROM events WHERE content LIKE 'later%'")[0][0]
        with db.write() as conn:
            conn.execute("DELETE FROM events WHERE id = ?", (gap,))
        inserted, release = threading.Event(), threading.Event()

        def restore_like() -> None:
            with db.write() as conn:
                conn.execute(
                    "INSERT INTO events(id, session_id, seq, role, type, content, created_at, fingerprint)"
                    " VALUES (?, 's1', 99, 'user', 'message', 'zebra okapi', '2025-01-01T00:00:00.000Z', 'f')",
                    (gap,),
                )
                inserted.set()
                release.wait(10)

        writer = threading.Thread(target=restore_like)
        writer.start()
        assert inserted.wait(10)
        marker = threading.Thread(target=lambda: service.indexer.run_batch("p"))  # type: ignore[union-attr]
        marker.start()
        time.sleep(1.0)  # the batch is now waiting for the writer's lock (or, unlocked, would have marked)
        release.set()
        writer.join(timeout=30)
        marker.join(timeout=60)
        assert not writer.is_alive() and not marker.is_alive()
        status = service.index("p").status
        assert (status.indexed_count, status.source_count, status.pending) == (20, 20, 0)
        assert db.query("SELECT count(*) FROM semantic_sources WHERE memory_row = ?", (-gap,)) == [(1,)]
        assert service.search("p", "zebra okapi", scope="conversation").hits[0].content == "zebra okapi"


def test_the_service_starts_and_answers_over_python_and_http(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    # semantic.index.events was refused at start-up on PostgreSQL; now the service builds and searches events.
    with _service(tmp_path, model_server, postgres_dsn) as service:
        assert service.settings.semantic is not None and service.settings.semantic.index.events
        with TestClient(create_app(service), base_url=LOCAL) as client:
            events = [
                {"role": "user", "content": "the login test is flaky again on CI"},
                {"role": "user", "content": "now upgrade postgres to version 16"},
            ]
            assert client.post("/v1/projects/p/sessions/s1/events", json={"events": events}).status_code == 200
            building = client.post("/v1/projects/p/search", json={"query": "postgres", "scope": "conversation"})
            assert building.status_code == 503 and building.json()["error"]["code"] == "index_building"
            service.index("p")
            status = client.get("/v1/projects/p/status").json()
            assert (status["indexed_count"], status["source_count"], status["index"]["pending"]) == (2, 2, 0)
            for scope in ("conversation", "all"):
                found = client.post("/v1/projects/p/search", json={"query": "upgrade postgres", "scope": scope})
                assert found.status_code == 200, found.text
                body = found.json()
                assert body["mode"] == "hybrid" and body["hits"][0]["event_id"] == event_id("s1", 2)
                assert body["hits"][0]["kind"] == "event" and body["hits"][0]["seq"] == 2
        python = service.search("p", "flaky login", scope="conversation")
        assert python.hits[0].seq == 1 and not python.partial
        assert service.search("p", "flaky login").hits == []  # memories stay the default scope


def test_a_rebuild_and_a_move_treat_the_index_as_derived(
    tmp_path: Path, model_server: ModelServer, postgres_dsn: str
) -> None:
    events = _conversation(40, seed=9)
    with _service(tmp_path / "sqlite", model_server, None) as sqlite:
        _fill(sqlite, events)
        expected = {
            query: _ids(sqlite.search("p", query, scope="conversation"))
            for query in ("auth clock mock", "deploy rollback cache", "postgres vacuum index")
        }
        with _service(tmp_path / "pg", model_server, postgres_dsn) as postgres:
            # The move copies canonical rows only: the copy's events wait above its watermark (0).
            report = migrate_project(sqlite, postgres, "p")
            assert not report.mismatches, report.mismatches
            db = postgres.database("p")
            assert db.query("SELECT count(*) FROM semantic_chunks") == [(0,)]
            assert db.query("SELECT marked_through FROM event_marker_progress") == [(0,)]
            assert postgres.status("p").index.pending == 44  # type: ignore[union-attr]
            postgres.index("p")
            for query, ids in expected.items():
                assert _ids(postgres.search("p", query, scope="conversation")) == ids, query
            canonical = db.query("SELECT * FROM events ORDER BY id")
    # Other chunk settings: every derived row goes and the watermark moves back, so every event is indexed
    # again; the canonical rows stay as they were.
    with _service(tmp_path / "pg", model_server, postgres_dsn, chunk_bytes=400) as postgres:
        rebuilt = postgres.index("p")
        assert rebuilt.totals.reset and (rebuilt.status.indexed_count, rebuilt.status.pending) == (44, 0)
        db = postgres.database("p")
        assert db.query("SELECT count(*) FROM semantic_sources WHERE memory_row < 0") == [(42,)]
        assert db.query("SELECT * FROM events ORDER BY id") == canonical
        for query, ids in expected.items():
            assert _ids(postgres.search("p", query, scope="conversation")) == ids, query


def test_the_background_indexer_finds_new_events(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> None:
    # Appends notify nobody: the background indexer finds a project with events above its watermark.
    section = {"index": {"events": True, "background": True, "poll_seconds": 0.2}}
    with _service(tmp_path, model_server, postgres_dsn, **section) as service:
        service.append_events("p", "s1", [{"role": "user", "content": "zebra quagga okapi"}])
        service.append_events("p", "s1", [{"role": "user", "content": "auth login clock"}])
        deadline = time.monotonic() + 30
        while service.status("p").indexed_count < 2:
            assert time.monotonic() < deadline, "the background indexer did not index the events"
            time.sleep(0.1)
        found = service.search("p", "zebra quagga okapi", scope="conversation")
        assert found.hits[0].seq == 1 and not found.partial
