"""Helpers for the transcript importer tests: the fixture folders, reading stored events back."""

from __future__ import annotations

import json
import selectors
import shutil
import subprocess
from pathlib import Path
from typing import Any

import apsw

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "transcripts"


def copy_fixture(name: str, into: Path) -> Path:
    """A writable copy of ``tests/data/transcripts/<name>`` (tests grow and damage their copies)."""
    target = into / name
    shutil.copytree(FIXTURES / name, target)
    return target


def stored_events(data_dir: Path, project: str) -> list[tuple[Any, ...]]:
    """Every event of a project as ``(session, seq, role, type, content, tool_name, tool_args, call id)``."""
    conn = apsw.Connection(str(data_dir / "projects" / project / "obsmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(
            "SELECT session_id, seq, role, type, content, tool_name, tool_args, tool_call_id FROM events"
            " ORDER BY session_id, seq"
        ).fetchall()
    finally:
        conn.close()


def write_jsonl(path: Path, records: list[Any], *, mode: str = "w") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode, encoding="utf-8") as handle:
        for record in records:
            handle.write((record if isinstance(record, str) else json.dumps(record)) + "\n")
    return path


def read_line(process: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The process's next line of output, waiting at most ``timeout`` seconds (a hang fails, never blocks)."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError(f"no output within {timeout} s")
    return process.stdout.readline()
