"""The canonical store: WAL, versioned checksummed migrations, and clear errors for a damaged file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw
import pytest

from obsmem.app import Obsmem
from obsmem.errors import StorageError
from obsmem.projects import ProjectRegistry
from obsmem.storage.connection import MMAP_BYTES, open_connection
from obsmem.storage.migrations import MIGRATIONS, Migration, migrate


def _fresh(tmp_path: Path) -> apsw.Connection:
    return open_connection(tmp_path / "obsmem.db", create=True)


def test_migrations_are_applied_once_and_recorded_with_their_checksums(tmp_path: Path) -> None:
    conn = _fresh(tmp_path)
    assert migrate(conn) == [m.version for m in MIGRATIONS]
    assert migrate(conn) == []  # nothing twice
    ledger = conn.execute("SELECT version, name, checksum FROM schema_migrations ORDER BY version").fetchall()
    assert ledger == [(m.version, m.name, hashlib.sha256(m.sql.encode()).hexdigest()) for m in MIGRATIONS]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_edited_migration_is_refused(tmp_path: Path) -> None:
    conn = _fresh(tmp_path)
    migrate(conn)
    first = MIGRATIONS[0]
    edited = (Migration(first.version, first.name, first.sql + "\n-- edited"), *MIGRATIONS[1:])
    with pytest.raises(StorageError) as caught:
        migrate(conn, edited)
    assert "never be edited" in caught.value.message and caught.value.code == "storage_error"


def test_a_database_from_a_newer_obsmem_is_refused(tmp_path: Path) -> None:
    conn = _fresh(tmp_path)
    migrate(conn)
    conn.execute("INSERT INTO schema_migrations(version, name, checksum) VALUES (99, 'future', 'x')")
    with pytest.raises(StorageError) as caught:
        migrate(conn)
    assert "newer" in caught.value.message


def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path) -> None:
    conn = _fresh(tmp_path)
    broken = Migration(1, "broken", "CREATE TABLE half_done (x); SELECT no_such_function();")
    with pytest.raises(apsw.SQLError):
        migrate(conn, (broken,))
    assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half_done'").fetchone()[0] == 0


def test_a_damaged_database_file_is_a_storage_error_not_a_crash(tmp_path: Path) -> None:
    registry = ProjectRegistry(tmp_path / "data")
    path = registry.database_path("junk")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not an SQLite database" * 300)
    with Obsmem(data_dir=tmp_path / "data") as service, pytest.raises(StorageError) as caught:
        service.search("junk", "anything")
    assert caught.value.code == "storage_corrupt" and caught.value.status == 503
    assert "junk/obsmem.db" in caught.value.message and str(tmp_path) not in caught.value.message


def test_connections_map_the_whole_database_file(tmp_path: Path) -> None:
    # Searches validate rows scattered over the file; the bundled SQLite must accept the whole-file map
    # (it silently caps mmap_size at its compile-time maximum, which would bring back read() per page).
    conn = open_connection(tmp_path / "m.db", create=True)
    assert conn.execute("PRAGMA mmap_size").fetchone()[0] == MMAP_BYTES >= 16 * 1024**3
    conn.close()
