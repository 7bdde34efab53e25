"""The durable watermark of each imported source file (table ``import_files``, migration 5): its only SQL.

One row per ``(source, path)`` in the project database the file's sessions go to: how many bytes were
consumed, checksums of the head and tail of that prefix, the file's size and modification time at the
time, and the reader's state there. See :mod:`obsmem.transcripts.importer` for how they are used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from obsmem.dates import now_iso
from obsmem.storage import ProjectDatabase


@dataclass
class Watermark:
    source: str
    path: str
    offset: int = 0
    size: int = 0
    mtime_ns: int = 0
    head_sha256: str = ""
    tail_sha256: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    events: int = 0


def load_watermark(db: ProjectDatabase, source: str, path: str) -> Watermark | None:
    with db.read() as conn:
        row = conn.execute(
            "SELECT offset, size, mtime_ns, head_sha256, tail_sha256, state, events FROM import_files"
            " WHERE source = ? AND path = ?",
            (source, path),
        ).fetchone()
    if row is None:
        return None
    offset, size, mtime_ns, head, tail, state, events = row
    try:
        saved = json.loads(state)
    except json.JSONDecodeError:
        saved = None
    if not isinstance(saved, dict):
        return None  # a state this version cannot read is treated as no watermark (the file is merged)
    return Watermark(source, path, offset, size, mtime_ns, head, tail, saved, events)


def save_watermark(db: ProjectDatabase, mark: Watermark) -> None:
    with db.write() as conn:
        conn.execute(
            "INSERT INTO import_files(source, path, offset, size, mtime_ns, head_sha256, tail_sha256, state,"
            " events, imported_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(source, path) DO UPDATE SET offset = excluded.offset, size = excluded.size,"
            " mtime_ns = excluded.mtime_ns, head_sha256 = excluded.head_sha256,"
            " tail_sha256 = excluded.tail_sha256, state = excluded.state, events = excluded.events,"
            " imported_at = excluded.imported_at",
            (
                mark.source,
                mark.path,
                mark.offset,
                mark.size,
                mark.mtime_ns,
                mark.head_sha256,
                mark.tail_sha256,
                json.dumps(mark.state, separators=(",", ":"), sort_keys=True),
                mark.events,
                now_iso(),
            ),
        )
