"""The PostgreSQL backend's storage contract: projects in schemas, checksummed migrations, one writer per
project, one snapshot per read, faults as storage errors."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from obsmem.errors import ProjectNotFound, StorageError
from obsmem.storage import PostgresStore
from obsmem.storage.postgres import POSTGRES_MIGRATIONS, project_schema
from obsmem.storage.postgres.sql import to_psycopg

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def store(postgres_dsn: str) -> Iterator[PostgresStore]:
    store = PostgresStore(postgres_dsn, pool_size=4)
    yield store
    store.close()


def test_placeholders_are_translated_outside_quotes_and_percent_signs_doubled() -> None:
    assert to_psycopg("SELECT ? WHERE a LIKE '%?%' AND \"x?\" = ?") == (
        "SELECT %s WHERE a LIKE '%%?%%' AND \"x?\" = %s"
    )


def test_a_read_never_creates_a_project(store: PostgresStore, postgres_dsn: str) -> None:
    with pytest.raises(ProjectNotFound):
        store.get("ghost")
    assert not store.exists("ghost") and store.names() == []
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", (project_schema("ghost"),)).fetchone() == (None,)


def test_a_project_is_created_migrated_and_listed(store: PostgresStore, postgres_dsn: str) -> None:
    db = store.get("alpha", create=True)
    assert store.exists("alpha") and store.names() == ["alpha"]
    with db.read() as conn:
        rows = conn.execute("SELECT version, name, checksum FROM schema_migrations ORDER BY version").fetchall()
    assert rows == [(m.version, m.name, m.checksum) for m in POSTGRES_MIGRATIONS]
    # A second store (another server process) opens it without applying anything again.
    other = PostgresStore(postgres_dsn, pool_size=1)
    try:
        assert other.get("alpha") is not None and other.names() == ["alpha"]
    finally:
        other.close()


def test_an_edited_or_newer_migration_is_refused(store: PostgresStore, postgres_dsn: str) -> None:
    db = store.get("alpha", create=True)
    with db.write() as conn:
        conn.execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1")
    fresh = PostgresStore(postgres_dsn, pool_size=1)
    try:
        with pytest.raises(StorageError, match="applied migrations must never be edited"):
            fresh.get("alpha")
        with db.write() as conn:
            conn.execute(
                "UPDATE schema_migrations SET checksum = ? WHERE version = 1", (POSTGRES_MIGRATIONS[0].checksum,)
            )
            conn.execute("INSERT INTO schema_migrations(version, name, checksum) VALUES (999, 'future', 'x')")
        with pytest.raises(StorageError, match="newer than this obsmem understands"):
            fresh.get("alpha")
    finally:
        fresh.close()


def test_projects_are_isolated(store: PostgresStore) -> None:
    alpha, beta = store.get("alpha", create=True), store.get("beta", create=True)
    with alpha.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s1', 'a', 'a', 0, 0)")
    with beta.read() as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
    with beta.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s1', 'b', 'b', 0, 0)")  # the same key in its own table
    with alpha.read() as conn:
        assert conn.execute("SELECT created_at FROM sessions").fetchall() == [("a",)]


def test_a_failed_write_leaves_nothing(store: PostgresStore) -> None:
    db = store.get("alpha", create=True)
    with pytest.raises(RuntimeError), db.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s1', 'a', 'a', 0, 0)")
        raise RuntimeError("stop")
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_writers_of_one_project_never_lose_an_update(store: PostgresStore) -> None:
    """Read-then-write in many threads: the writer lock makes each see the previous commit, as
    BEGIN IMMEDIATE does on SQLite (without it, read committed would lose updates)."""
    db = store.get("alpha", create=True)
    with db.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s', 'a', 'a', 0, 0)")

    def bump() -> None:
        for _ in range(25):
            with db.write() as conn:
                (value,) = conn.execute("SELECT last_seq FROM sessions WHERE session_id = 's'").fetchone()
                conn.execute("UPDATE sessions SET last_seq = ? WHERE session_id = 's'", (value + 1,))

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    with db.read() as conn:
        assert conn.execute("SELECT last_seq FROM sessions").fetchone() == (100,)


def test_a_read_sees_one_snapshot(store: PostgresStore) -> None:
    db = store.get("alpha", create=True)
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
        writer = threading.Thread(target=lambda: _insert_session(db))
        writer.start()
        writer.join(timeout=60)
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)


def _insert_session(db) -> None:  # type: ignore[no-untyped-def]
    with db.write() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s', 'a', 'a', 0, 0)")


def test_a_nested_write_joins_the_outer_transaction(store: PostgresStore) -> None:
    db = store.get("alpha", create=True)
    with pytest.raises(RuntimeError), db.write() as outer:
        outer.execute("INSERT INTO sessions VALUES ('s', 'a', 'a', 0, 0)")
        with db.write() as inner:
            assert inner is outer
        raise RuntimeError("stop")
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_an_unreachable_server_is_a_storage_error_without_the_password(tmp_path) -> None:  # type: ignore[no-untyped-def]
    secret = "pw-that-must-not-leak"
    dsn = f"postgresql://obsmem:{secret}@/nothing?host={tmp_path}&connect_timeout=1"
    with pytest.raises(StorageError) as caught:
        PostgresStore(dsn, pool_size=1, connect_seconds=1)
    assert secret not in str(caught.value) and "storage.dsn" in str(caught.value)


def test_a_write_inside_a_read_snapshot_is_a_clear_error(store: PostgresStore) -> None:
    db = store.get("alpha", create=True)
    with db.read(), pytest.raises(RuntimeError, match="inside a read snapshot"), db.write():
        pass
    with db.write(), db.read() as conn:  # a read inside a write joins it
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
