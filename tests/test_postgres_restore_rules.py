"""Export and restore mean the same on both backends: byte order of text keys, blobs, refusals named.

- A PostgreSQL database whose default collation is a language's would order text keys (session ids,
  import paths, record ids) its own way. The tests' server is initdb'd with the C locale and has no ICU nor
  any other locale, so no collation here orders differently from bytes: the test checks the statements
  export and recall send instead (every text key they order by is ``COLLATE "C"``), and that a migrated
  project still compares equal.
- A blob bound for a text column is refused on both backends, naming the line and the column.
- A row refused by a trigger of the PostgreSQL schema is reported with the trigger's message.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from obsmem.app import Obsmem
from obsmem.app.migrate import migrate_project
from obsmem.errors import ExportInvalid
from obsmem.exporting import export_project, restore_project
from obsmem.exporting.postgres import broken_rule
from obsmem.settings import Settings, load_settings
from obsmem.storage import PostgresConnection
from support.exports import rewritten_export

PROJECT = "ordering"
SESSIONS = ("a-1", "B-1", "a_2", "a.3")  # byte order: B-1, a-1, a.3, a_2


def _postgres(tmp: Path, dsn: str) -> Settings:
    return load_settings(data_dir=tmp / "pg", storage={"backend": "postgres", "dsn": dsn})


def _source(tmp: Path) -> Obsmem:
    service = Obsmem(load_settings(data_dir=tmp / "sqlite"))
    for session in SESSIONS:
        service.append_events(PROJECT, session, [{"role": "user", "seq": 1, "content": f"deploy from {session}"}])
    written = service.add_observations(
        PROJECT,
        [
            {
                "session_id": "a-1",
                "content": "deploys came from two sessions",
                "timestamp": "2026-01-02 10:00",
                "source_refs": [{"session_id": "a-1", "seq": 1}, {"session_id": "B-1", "seq": 1}],
            }
        ],
    )
    assert not written.rejected
    with service.projects.get(PROJECT).write() as conn:
        for record in ("r-b", "R-a"):
            conn.execute("INSERT INTO import_records(record_id, session_id) VALUES (?, 'a-1')", (record,))
    return service


def _statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement PostgreSQL connections run from now on (the real ones, recorded on the way)."""
    sent: list[str] = []
    execute = PostgresConnection.execute

    def recording(self: PostgresConnection, sql: str, params: Any = ()) -> Any:
        sent.append(sql)
        return execute(self, sql, params)

    monkeypatch.setattr(PostgresConnection, "execute", recording)
    return sent


def _export(service: Obsmem, path: Path) -> Path:
    with path.open("wb") as out:
        export_project(service, PROJECT, out)
    return path


BYTE_ORDERED = {
    "sessions": 'ORDER BY "session_id" COLLATE "C"',
    "import_files": 'ORDER BY "source" COLLATE "C", "path" COLLATE "C"',
    "import_records": 'ORDER BY "record_id" COLLATE "C"',
    "coverage": 'ORDER BY "session_id" COLLATE "C", "seq", "part_start"',
    "observer_progress": 'ORDER BY "session_id" COLLATE "C"',
    "active_generation": 'ORDER BY "session_id" COLLATE "C"',
}


def test_exports_and_recall_order_text_keys_by_bytes(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _source(tmp_path) as source, Obsmem(_postgres(tmp_path, postgres_dsn)) as target:
        assert migrate_project(source, target, PROJECT).verified
        sent = _statements(monkeypatch)
        target_file = _export(target, tmp_path / "t.jsonl")
        for table, order in BYTE_ORDERED.items():
            selects = [sql for sql in sent if sql.startswith('SELECT "') and f'FROM "{table}"' in sql]
            assert selects and all(sql.endswith(order) for sql in selects), (table, selects)
        records = [orjson.loads(line) for line in target_file.read_bytes().splitlines()[1:-1]]
        assert [record["row"]["session_id"] for record in records if record["kind"] == "session"] == sorted(SESSIONS)
        memory_id = source.search(PROJECT, "two sessions").hits[0].to_dict()["id"]
        sent.clear()
        recalled = target.recall(PROJECT, memory_id).to_dict()
        assert any('ORDER BY e.session_id COLLATE "C", e.seq' in sql for sql in sent)
        assert [event["session_id"] for event in recalled["sources"]] == ["B-1", "a-1"]
        assert recalled == source.recall(PROJECT, memory_id).to_dict()


def _with_blob_content(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for record in records:
        if record["kind"] == "event":
            record["row"]["content"] = {"base64": base64.b64encode(b"hello world").decode()}
    return records


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_blob_for_a_text_column_is_refused(tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> None:
    with Obsmem(load_settings(data_dir=tmp_path / "src")) as source:
        source.append_events(PROJECT, "s1", [{"role": "user", "seq": 1, "content": "hello world"}])
        buffer = io.BytesIO()
        export_project(source, PROJECT, buffer)
    tampered = rewritten_export(buffer.getvalue(), _with_blob_content, tmp_path / "blob.jsonl")
    settings = (
        _postgres(tmp_path, request.getfixturevalue("postgres_dsn"))
        if backend == "postgres"
        else load_settings(data_dir=tmp_path / "dst")
    )
    with Obsmem(settings) as target:
        with pytest.raises(ExportInvalid) as refused:
            restore_project(target, tampered, PROJECT)
        message = str(refused.value)
        assert "line 3" in message and "column content of events" in message
        assert "hello" not in message and "aGVsbG8" not in message
        with target.projects.get(PROJECT).read() as conn:
            assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0


def test_a_trigger_refusal_is_named_by_its_message(postgres_dsn: str, tmp_path: Path) -> None:
    with Obsmem(_postgres(tmp_path, postgres_dsn)) as service:
        service.append_events(PROJECT, "s1", [{"role": "user", "seq": 1, "content": "hello"}])
        with pytest.raises(psycopg.Error) as raised, service.projects.get(PROJECT).write() as conn:
            conn.execute("SELECT obsmem_refuse('coverage rows are never changed')")
    assert broken_rule(raised.value) == "a trigger of the schema: coverage rows are never changed"
