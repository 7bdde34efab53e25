"""The write-ahead log stays bounded: truncated after large writes, reported truthfully in status."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.storage import connection

LIMIT = 1024 * 1024  # a small limit keeps the test's writes small
BATCH = [{"role": "user", "content": f"{n:06d} " + "y" * 99_000} for n in range(30)]  # about 3 MB


@pytest.fixture
def memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Obsmem]:
    monkeypatch.setattr(connection, "WAL_TRUNCATE_BYTES", LIMIT)
    service = Obsmem(load_settings(data_dir=tmp_path / "data"))
    yield service
    service.close()


def test_a_large_write_leaves_no_large_wal(memory: Obsmem) -> None:
    memory.append_events("p", "s1", [{"role": "user", "content": "first"}])
    db = memory.database("p")
    for session in ("s2", "s3", "s4"):
        memory.append_events("p", session, BATCH)
        assert db.wal_bytes() <= LIMIT  # each batch wrote about three times the limit into the log
    status = memory.status("p")
    assert status.wal_bytes == db.wal_bytes() and status.events == 1 + 3 * len(BATCH)
    assert status.database_bytes == db.path.stat().st_size > 3 * 3_000_000  # the pages moved into the file


def test_a_reader_holding_the_log_delays_truncation_without_stalling_the_writer(memory: Obsmem) -> None:
    memory.append_events("p", "s1", [{"role": "user", "content": "first"}])
    db = memory.database("p")
    reader = apsw.Connection(str(db.path))  # another process's reader, holding a snapshot
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM events").fetchall()
    try:
        started = time.monotonic()
        memory.append_events("p", "s2", BATCH)
        assert time.monotonic() - started < connection.BUSY_TIMEOUT_MS / 1000 / 3  # not waiting on the reader
        assert db.wal_bytes() > LIMIT  # the reader still needs the log
        assert memory.status("p").wal_bytes == db.wal_bytes()
    finally:
        reader.execute("COMMIT")
        reader.close()
    memory.append_events("p", "s3", BATCH)  # the next large write truncates it
    assert db.wal_bytes() <= LIMIT


def test_small_writes_never_pay_for_a_checkpoint(memory: Obsmem) -> None:
    memory.append_events("p", "s1", [{"role": "user", "content": "first"}])
    db = memory.database("p")
    memory.append_events("p", "s1", [{"role": "user", "content": "second"}])
    assert 0 < db.wal_bytes() <= LIMIT  # the log is kept (and reused) while it is small
