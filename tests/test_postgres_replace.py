"""``migrate --replace`` and restores over a project: the old target stays until the copy is written whole.

Each backend is tested with a copy that fails after the old target would have been deleted before: on
PostgreSQL a source event holding U+0000 (which PostgreSQL text refuses), on SQLite an export whose rows
break the schema. The target must still hold its own data afterwards. Also here: which targets count as
holding data (every record kind, as the restore's check), and recall's default user on both backends.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest

from obsmem.app import Obsmem
from obsmem.app.migrate import holds_data, migrate_project
from obsmem.errors import ExportInvalid, NotOnPostgres, ProjectNotEmpty, StorageBusy
from obsmem.exporting import export_project, restore_project
from obsmem.settings import Settings, load_settings
from support.exports import rewritten_export

PROJECT = "replaceme"


def _postgres(tmp: Path, dsn: str) -> Settings:
    return load_settings(data_dir=tmp / "pg", storage={"backend": "postgres", "dsn": dsn})


def _event_count(service: Obsmem, project: str) -> int:
    with service.projects.get(project).read() as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Obsmem]:
    with Obsmem(load_settings(data_dir=tmp_path / "sqlite")) as service:
        for session in ("a-1", "b-1"):
            service.append_events(PROJECT, session, [{"role": "user", "seq": 1, "content": f"deploy {session}"}])
        yield service


def test_a_failed_copy_leaves_the_postgres_target_as_it_was(tmp_path: Path, postgres_dsn: str) -> None:
    with Obsmem(_postgres(tmp_path, postgres_dsn)) as target:
        target.append_events(PROJECT, "keep", [{"role": "user", "seq": 1, "content": "the target's own event"}])
    with (
        Obsmem(load_settings(data_dir=tmp_path / "nul")) as source,
        Obsmem(_postgres(tmp_path, postgres_dsn)) as target,
    ):
        source.append_events(PROJECT, "s", [{"role": "user", "seq": 1, "content": "text with \x00 in it"}])
        with pytest.raises(NotOnPostgres):
            migrate_project(source, target, PROJECT, replace=True)
        assert _event_count(target, PROJECT) == 1


def test_replace_on_postgres_swaps_the_project_whole(tmp_path: Path, postgres_dsn: str, source: Obsmem) -> None:
    with Obsmem(_postgres(tmp_path, postgres_dsn)) as target:
        target.append_events(PROJECT, "old", [{"role": "user", "seq": 1, "content": "replaced soon"}])
        report = migrate_project(source, target, PROJECT, replace=True)
        assert report.verified, report.mismatches
        assert _event_count(target, PROJECT) == 2
        assert [hit.to_dict()["id"] for hit in target.search(PROJECT, "replaced", scope="all").hits] == []


def _duplicate_first_event(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first event twice: its primary key is broken in the last row of the restore."""
    first = next(record for record in records if record["kind"] == "event")
    return [*records, first] if records[-1]["kind"] == "event" else _insert_after_events(records, first)


def _insert_after_events(records: list[dict[str, Any]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    last = max(index for index, record in enumerate(records) if record["kind"] == "event")
    return [*records[: last + 1], extra, *records[last + 1 :]]


def _export(service: Obsmem, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], path: Path) -> Path:
    buffer = io.BytesIO()
    export_project(service, PROJECT, buffer)
    return rewritten_export(buffer.getvalue(), change, path)


def test_a_failed_restore_leaves_the_sqlite_target_as_it_was(tmp_path: Path, source: Obsmem) -> None:
    broken = _export(source, _duplicate_first_event, tmp_path / "broken.jsonl")
    with Obsmem(load_settings(data_dir=tmp_path / "target")) as target:
        target.append_events(PROJECT, "keep", [{"role": "user", "seq": 1, "content": "the target's own event"}])
        with pytest.raises(ExportInvalid):
            restore_project(target, broken, PROJECT, replace=True)
        assert _event_count(target, PROJECT) == 1
        projects = target.projects.projects_dir
        assert sorted(entry.name for entry in projects.iterdir()) == [PROJECT]  # no staging left behind


def test_replace_on_sqlite_swaps_the_project_whole(tmp_path: Path, postgres_dsn: str, source: Obsmem) -> None:
    with Obsmem(_postgres(tmp_path, postgres_dsn)) as middle:
        assert migrate_project(source, middle, PROJECT).verified
        with Obsmem(load_settings(data_dir=tmp_path / "back")) as back:
            back.append_events(PROJECT, "old", [{"role": "user", "seq": 1, "content": "replaced soon"}])
            report = migrate_project(middle, back, PROJECT, replace=True)
            assert report.verified, report.mismatches
            assert _event_count(back, PROJECT) == 2
            assert sorted(entry.name for entry in back.projects.projects_dir.iterdir()) == [PROJECT]


def test_a_target_holding_only_import_records_needs_replace(tmp_path: Path, postgres_dsn: str, source: Obsmem) -> None:
    with Obsmem(_postgres(tmp_path, postgres_dsn)) as target:
        with target.database(PROJECT, create=True).write() as conn:
            conn.execute("INSERT INTO import_records(record_id, session_id) VALUES ('r1', 's1')")
        assert holds_data(target, PROJECT)
        with pytest.raises(ProjectNotEmpty):
            migrate_project(source, target, PROJECT)
        assert migrate_project(source, target, PROJECT, replace=True).verified


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_recall_finds_a_user_note_without_naming_the_user(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    settings = (
        _postgres(tmp_path, request.getfixturevalue("postgres_dsn"))
        if backend == "postgres"
        else load_settings(data_dir=tmp_path / "sqlite")
    )
    with Obsmem(settings) as service:
        service.append_events(PROJECT, "s1", [{"role": "user", "seq": 1, "content": "hello"}])
        saved = service.save_note(PROJECT, "the deploy runs on fridays", tier="user").to_dict()
        note_id = saved["note"]["id"] if "note" in saved else saved["id"]
        recalled = service.recall(PROJECT, note_id)
        assert type(recalled).__name__ == "RecalledNote"
        assert note_id in orjson.dumps(recalled.to_dict()).decode()


def test_replacing_a_sqlite_project_while_it_is_written_is_refused(tmp_path: Path, source: Obsmem) -> None:
    copy = tmp_path / "copy.jsonl"
    with copy.open("wb") as out:
        export_project(source, PROJECT, out)
    with Obsmem(load_settings(data_dir=tmp_path / "target")) as target:
        target.append_events(PROJECT, "keep", [{"role": "user", "seq": 1, "content": "the target's own event"}])
        writer = apsw.Connection(str(target.projects.database_path(PROJECT)))
        try:
            writer.execute("BEGIN IMMEDIATE")  # another process's write transaction, in progress
            with pytest.raises(StorageBusy, match="stop its servers and workers first"):
                restore_project(target, copy, PROJECT, replace=True)
            with pytest.raises(StorageBusy):
                target.projects.drop(PROJECT)
            writer.execute("ROLLBACK")
        finally:
            writer.close()
        assert _event_count(target, PROJECT) == 1
        assert sorted(entry.name for entry in target.projects.projects_dir.iterdir()) == [PROJECT]
        restore_project(target, copy, PROJECT, replace=True)
        assert _event_count(target, PROJECT) == 2
