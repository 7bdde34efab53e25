"""A whole project out and back in is lossless: the bundled sample after a full pipeline run (Observer,
Reflector and Dropper played by the scripted chat server on loopback, semantic mode through the loopback
embedding server) is exported, restored into a new project, and every row, id, search (exact and
hybrid), recall, projection and event-log entry of the copy is compared with the original's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from obsmem.app import Obsmem
from obsmem.exporting import DERIVED_TABLES, KINDS, RecordKind, export_project, project_tables, restore_project
from obsmem.exporting.rows import table_columns
from obsmem.sample import demo_queries, events_by_session, observations
from obsmem.settings import load_settings
from support.model_server import ModelServer
from support.pipeline_service import SMALL_REFLECTION, pipeline_options
from support.scripted_chat import DropperScript, ObserverScript, PipelineScript, ReflectorScript, ScriptedChatServer
from support.semantic_service import semantic_settings

SOURCE, COPY = "ledgerkite", "ledgerkite-copy"


@dataclass
class RoundTrip:
    service: Obsmem
    export_file: Path
    sessions: list[str]
    memory_ids: list[str]


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoundTrip]:
    data_dir = tmp_path_factory.mktemp("export-roundtrip")
    embeddings = ModelServer()
    script = PipelineScript(ObserverScript(group=2), ReflectorScript(), DropperScript())
    try:
        with ScriptedChatServer(script) as chat:
            settings = load_settings(
                data_dir=data_dir / "data",
                semantic=semantic_settings(embeddings),
                **pipeline_options(chat, **SMALL_REFLECTION),
            )
            with Obsmem(settings) as service:
                sessions = _run_the_pipeline_over_the_sample(service)
                service.index(SOURCE)
                # The source's events are in its trigram index, the copy's wait for housekeeping: conversation
                # searches must answer the same either way.
                assert service.index_conversation(SOURCE) > 0
                export_file = data_dir / "ledgerkite.jsonl"
                with export_file.open("wb") as out:
                    export_project(service, SOURCE, out)
                restore_project(service, export_file, COPY)
                service.index(COPY)
                memory_ids = [row[0] for row in service.database(SOURCE).query("SELECT memory_id FROM memories")]
                yield RoundTrip(service, export_file, sessions, memory_ids)
    finally:
        embeddings.stop()


def _run_the_pipeline_over_the_sample(service: Obsmem) -> list[str]:
    pool = service.start_workers(housekeeping=False)
    sessions = events_by_session()
    for session_id, events in sessions.items():
        batch = [{key: value for key, value in event.items() if key != "session_id"} for event in events]
        for start in range(0, len(batch), 100):
            service.append_events(SOURCE, session_id, batch[start : start + 100])
    # The sample's own observations (an external observer's) give the searches real text to find.
    assert not service.add_observations(SOURCE, observations()).rejected
    assert pool.drain(300), "the pipeline did not finish"
    # A second reflection round on the longest sessions moves their active generation past 1, so the
    # restore replays a pointer along a chain, not only a first generation.
    longest = sorted(sessions, key=lambda s: len(sessions[s]), reverse=True)[:3]
    for session_id in longest:
        service.reflect(SOURCE, session_id)
    assert pool.drain(300), "the reflections did not finish"
    service.switch_models(SOURCE, {"dropper": {"model_id": "scripted-dropper"}})
    service.stop_workers()
    # Events that arrive with no worker running stay a backlog (its observe job is queued, not exported):
    # the Observer's progress counters must come back with them.
    first = next(iter(sessions))
    service.append_events(SOURCE, first, [{"role": "user", "content": "one more thing: rotate the staging keys"}])
    return list(sessions)


def _rows(service: Obsmem, project: str, kind: RecordKind) -> list[tuple[Any, ...]]:
    """The kind's rows as exported: every column but the derived ones (which events are in date order)."""
    where = f" WHERE {kind.where}" if kind.where else ""
    db = service.database(project)
    with db.read() as conn:
        columns = ", ".join(f'"{name}"' for name in table_columns(conn, kind.table))
    return db.query(f'SELECT {columns} FROM "{kind.table}"{where} ORDER BY 1, 2')


def test_the_pipeline_left_every_kind_of_record_behind(round_trip: RoundTrip) -> None:
    """Otherwise the comparisons below would pass over empty tables."""
    db = round_trip.service.database(SOURCE)
    # Notes, judgments and the trust ledger are written by agents, and import watermarks by transcript
    # imports, not by the pipeline (see test_export.py and tests/test_import_cli.py).
    not_from_the_pipeline = {"note", "judgment", "trust_entry", "import_file", "import_record"}
    pipeline_kinds = [kind for kind in KINDS if kind.name not in not_from_the_pipeline]
    counts = {kind.name: len(_rows(round_trip.service, SOURCE, kind)) for kind in pipeline_kinds}
    empty = [name for name, count in counts.items() if count == 0]
    assert not empty, f"the pipeline run left no {empty} rows"
    assert db.query("SELECT max(number) FROM active_generation")[0][0] >= 2
    assert db.query("SELECT count(*) FROM observer_progress WHERE pending_events > 0")[0][0] > 0, "no backlog kept"


def test_every_canonical_row_is_restored_as_it_was(round_trip: RoundTrip) -> None:
    for kind in KINDS:
        assert _rows(round_trip.service, COPY, kind) == _rows(round_trip.service, SOURCE, kind), kind.name


def test_every_table_of_a_fully_used_database_is_exported_or_derived_with_a_reason(round_trip: RoundTrip) -> None:
    """The schema's tables (the indexer's own included, created by indexing) are each exported or declared
    derived, so no table is left out of exports silently."""
    tables = project_tables(round_trip.service.database(SOURCE).connection())
    assert {"semantic_fts", "semantic_context", "semantic_vectors", "jobs", "memory_trigrams"} <= tables
    exported = {kind.table for kind in KINDS}
    assert exported <= tables | {"sqlite_sequence"}
    assert not exported & set(DERIVED_TABLES)
    assert tables <= exported | set(DERIVED_TABLES), sorted(tables - exported - set(DERIVED_TABLES))
    assert all(len(reason) > 20 for reason in DERIVED_TABLES.values())


def _queries(round_trip: RoundTrip) -> list[dict[str, Any]]:
    contents = round_trip.service.database(SOURCE).query("SELECT content FROM memories ORDER BY id")
    words = sorted({w for (text,) in contents for w in re.findall(r"[a-z]{6,}", text.lower())})
    queries: list[dict[str, Any]] = [
        {"query": q["query"], "after": q.get("after"), "before": q.get("before")} for q in demo_queries()
    ]
    queries += [{"query": word} for word in words[::25]]
    queries += [{"query": "reflection over"}, {"query": "observed in call"}, {"query": "event 1"}]
    queries += [{"query": "migration", "session_id": session} for session in round_trip.sessions]
    return queries


@pytest.mark.parametrize(
    ("mode", "scope"), [("exact", "memories"), ("hybrid", "memories"), ("exact", "conversation"), ("exact", "all")]
)
def test_every_search_answers_the_same(round_trip: RoundTrip, mode: str, scope: str) -> None:
    service = round_trip.service
    if scope != "memories":
        indexed = service.database(COPY).query("SELECT indexed_through FROM event_trigram_progress")[0][0]
        assert indexed == 0, "the copy's events should be searched without their index"
    compared = 0
    for query in _queries(round_trip):
        original = service.search(SOURCE, mode=mode, limit=50, scope=scope, **query).to_dict()
        copy = service.search(COPY, mode=mode, limit=50, scope=scope, **query).to_dict()
        assert copy == original, query
        compared += bool(original["hits"])
    assert compared >= 20


def test_every_memory_recalls_the_same(round_trip: RoundTrip) -> None:
    service = round_trip.service
    for memory_id in round_trip.memory_ids:
        assert service.recall(COPY, memory_id).to_dict() == service.recall(SOURCE, memory_id).to_dict()


def test_every_projection_and_memory_view_is_the_same(round_trip: RoundTrip) -> None:
    service = round_trip.service
    for session_id in round_trip.sessions:
        assert service.memory(COPY, session_id).to_dict() == service.memory(SOURCE, session_id).to_dict()
        assert service.memory_details(COPY, session_id) == service.memory_details(SOURCE, session_id)
        original, copy = service.session_status(SOURCE, session_id), service.session_status(COPY, session_id)
        assert (copy.generation, copy.pool, copy.generation_count) == (
            original.generation,
            original.pool,
            original.generation_count,
        )


def test_the_event_log_and_model_choices_are_the_same(round_trip: RoundTrip) -> None:
    service = round_trip.service
    original = [event.to_dict() for event in service.pipeline_events(SOURCE, limit=1000)]
    assert original and [event.to_dict() for event in service.pipeline_events(COPY, limit=1000)] == original
    assert service.models(COPY) == service.models(SOURCE)


def test_exporting_the_copy_writes_the_same_records(round_trip: RoundTrip, tmp_path: Path) -> None:
    again = tmp_path / "copy.jsonl"
    with again.open("wb") as out:
        export_project(round_trip.service, COPY, out)
    first, second = round_trip.export_file.read_bytes().splitlines(), again.read_bytes().splitlines()
    assert second[1:-1] == first[1:-1]  # the header names its own project and time; the records are identical


def test_a_restored_project_never_reuses_the_job_ids_its_history_cites(round_trip: RoundTrip) -> None:
    service = round_trip.service
    restore_project(service, round_trip.export_file, "ledgerkite-third")
    cited = service.database(SOURCE).query(
        "SELECT max(job_id) FROM (SELECT job_id FROM coverage UNION ALL SELECT job_id FROM om_events)"
    )[0][0]
    assert cited is not None and cited > 1
    queued = service.observe("ledgerkite-third", round_trip.sessions[0])
    assert queued.created and queued.job_id > cited
