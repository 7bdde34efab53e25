"""Import transcript files into projects, incrementally and idempotently.

Every event goes through the app's normal append (``append``: validation, redaction, the Observer's
trigger), in batches of up to :data:`CHUNK_EVENTS` events per session; the importer only decides which
records are new and which seq each event gets.

Line formats (append-only files). The watermark of a file (``import_files``) records the bytes consumed,
checksums of the first and last 64 KiB of them, the file's size and time, and the reader's state there,
including the next seq of each session. An import:

1. passes over a file whose size and modification time equal the watermark's (nothing is read);
2. resumes after the watermark when the consumed prefix is unchanged (its checksums still match): only
   the new lines are read, and their events are numbered where the last import stopped, so an import
   in any number of steps stores exactly what one import of the final file would;
3. treats a file whose consumed prefix changed (truncated, or rewritten by the agent) as *rewritten*:
   it is read again from the start and *merged*: an event already stored in its session (same role,
   type, content, tool and arguments after redaction, counted with multiplicity) is a duplicate, and
   only the others are appended after the session's last seq. Nothing stored is ever changed or
   removed, and no event is stored twice.

Seqs depend on the file alone: a session's events are numbered from 1 in file order (the next seq is
saved with the watermark). The watermark is saved after each chunk's events are committed; a crash in
between re-reads the chunk, whose events get the same seqs again and are counted as duplicates (so does
an import after the watermark was lost). A session that already holds other events at those seqs
(``seq_conflict``: another file or an append fed it) is merged as in 3.

Document formats (rewritten files, databases) are read whole; per session the watermark records how many
events were stored and the key of the last one, and the events after it are appended. A session whose
stored prefix no longer matches is merged as in 3.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from obsmem.errors import ObsmemError, SeqConflict, StorageError, ValidationFailed
from obsmem.events import AppendReceipt, EventIn, event_fingerprints, last_seq, redacted
from obsmem.storage import ProjectDatabase
from obsmem.transcripts.aider import AiderFormat
from obsmem.transcripts.chat import ObsmemEventsFormat, OpenAIChatFormat
from obsmem.transcripts.claude_code import ClaudeCodeFormat
from obsmem.transcripts.codex import CodexFormat
from obsmem.transcripts.files import (
    DAMAGED_COMPRESSION,
    WINDOW,
    FileStamp,
    complete_lines,
    is_compressed,
    open_text_bytes,
    stamp,
)
from obsmem.transcripts.formats import DocumentFormat, LineFormat
from obsmem.transcripts.gemini_cli import GeminiCliFormat
from obsmem.transcripts.mapping import project_for_cwd, project_for_hash
from obsmem.transcripts.opencode import OpencodeDatabaseFormat, OpencodeTreeFormat
from obsmem.transcripts.records import ReaderOptions, SessionDoc, Skip, Turn
from obsmem.transcripts.replays import ReplayFilter
from obsmem.transcripts.reports import FileReport, ImportRun
from obsmem.transcripts.rewinds import in_order_merge
from obsmem.transcripts.watermarks import (
    Watermark,
    load_watermark,
    save_watermark,
)
from obsmem.validation import first_problem

_Read = TypeVar("_Read", Turn, SessionDoc)  # what a transcript reader yields besides its skips

CHUNK_EVENTS = 5000
_SHA256 = re.compile(r"[0-9a-f]{64}")

LINE_FORMATS: dict[str, type[LineFormat]] = {
    "claude-code": ClaudeCodeFormat,
    "codex": CodexFormat,
    "aider": AiderFormat,
    "openai-chat": OpenAIChatFormat,
    "obsmem": ObsmemEventsFormat,
}
DOCUMENT_SOURCES = ("gemini-cli", "opencode")

Append = Callable[[str, str, list[Any]], AppendReceipt]
"""``append(project, session_id, events)``: the app's append (validation, redaction, Observer trigger)."""
OpenDatabase = Callable[[str], ProjectDatabase]
FileProgress = Callable[[str, int, int], None]
"""Called as ``(path, bytes done, bytes total)`` while a file is read."""


@dataclass(frozen=True)
class ImportOptions:
    """What the ``[transcripts]`` settings decide, and ``--project``."""

    reader: ReaderOptions = ReaderOptions()
    project_map: Mapping[str, str] | None = None
    project: str | None = None


def _fingerprint(event: EventIn) -> str:
    clean = redacted(event)
    return clean.fingerprint(clean.tool_args_json())


def _stored_fingerprint(turn: Turn) -> str | None:
    """The fingerprint the turn's event has (or had) when stored; None for one that is not valid, which is
    never stored (reported where it is stored, not here)."""
    try:
        return _fingerprint(EventIn.model_validate(turn.event))
    except ValidationError:
        return None


class _Sessions:
    """Seqs of the sessions one file feeds, and the sessions being merged (see the module docstring)."""

    def __init__(self, db: ProjectDatabase, saved: dict[str, int], merge_all: bool) -> None:
        self.db = db
        self.next: dict[str, int] = dict(saved)
        self.merge_all = merge_all
        self.merging: dict[str, Counter[str]] = {}

    def is_merging(self, session: str) -> bool:
        if session in self.merging:
            return True
        if self.merge_all:
            self.start_merge(session)
            return True
        return False

    def start_merge(self, session: str) -> None:
        with self.db.read() as conn:
            self.merging[session] = Counter(event_fingerprints(conn, session))

    def discount(self, stored: list[Turn]) -> None:
        """Take the events of records a merging session already holds (known by record id, left out)
        out of its counts, so only events stored without an id to match them by are matched by content."""
        for turn in stored:
            fingerprint = _stored_fingerprint(turn) if self.is_merging(turn.session_id) else None
            if fingerprint is not None:
                self.merging[turn.session_id][fingerprint] -= 1

    def assign(self, session: str, event: EventIn) -> EventIn:
        # A session this file has not numbered yet starts at 1, not after what is stored: numbering then
        # depends on the file alone, so events stored before a watermark was lost are duplicates again.
        # A session that already holds other events meets them as a seq_conflict and is merged.
        if session not in self.next:
            self.next[session] = 1
        if event.seq is not None:
            self.next[session] = max(self.next[session], event.seq + 1)
            return event
        seq = self.next[session]
        self.next[session] = seq + 1
        event.seq = seq  # the importer's own fresh object: cheaper than a copy, on the hot path
        return event


class TranscriptImporter:
    """Imports the files of one source (see the module docstring)."""

    def __init__(self, source: str, options: ImportOptions, append: Append, database: OpenDatabase) -> None:
        if source not in LINE_FORMATS and source not in DOCUMENT_SOURCES:
            known = ", ".join([*LINE_FORMATS, *DOCUMENT_SOURCES])
            raise ValidationFailed(f"source must be one of {known}", field="source")
        self.source = source
        self.options = options
        self.project_map: Mapping[str, str] = options.project_map or {}
        self.append = append
        self.database = database

    def run(self, paths: Sequence[Path], progress: FileProgress | None = None) -> ImportRun:
        result = ImportRun(self.source)
        for path in paths:
            result.files.append(self.import_file(path, progress))
        return result

    def import_file(self, path: Path, progress: FileProgress | None = None) -> FileReport:
        report = FileReport(str(path), self.source)
        try:
            if self.source in LINE_FORMATS:
                self._line_file(path, report, progress)
            else:
                self._document_file(path, report)
        except FileNotFoundError:
            report.status = "missing"
            report.problem("file_missing", 0, "the file disappeared before it could be read")
        except (IsADirectoryError, PermissionError) as exc:
            report.status = "failed"
            report.problem("unreadable", 0, exc.strerror or type(exc).__name__)
        except OSError as exc:  # an I/O error, a compressed file with a bad header, ...
            report.status = "failed"
            report.problem("read_error", 0, exc.strerror or "the file could not be read")
        except DAMAGED_COMPRESSION:
            report.status = "failed"
            report.problem("read_error", 0, "the compressed data is damaged")
        except StorageError as exc:  # a locked or failing project database: the next import tries again
            report.status = "failed"
            report.problem(exc.code, report.line, exc.message)
        return report

    # -- line formats ----------------------------------------------------------------------------------

    def _line_file(self, path: Path, report: FileReport, progress: FileProgress | None) -> None:
        fmt = LINE_FORMATS[self.source]
        project = self.options.project or project_for_cwd(
            fmt(self.options.reader, path, {}).project_cwd(), self.project_map
        )
        if project is None:
            report.status = "failed"
            report.problem("no_project", 0, "the transcript records no working directory; pass --project")
            return
        report.projects.add(project)
        db = self.database(project)
        key = str(path.resolve())
        mark = load_watermark(db, self.source, key)
        now = stamp(path)
        if mark is not None and (now.size, now.mtime_ns) == (mark.size, mark.mtime_ns):
            report.status = "unchanged"
            return
        start = _Resume.check(path, mark)
        if start.rewritten:
            report.status = "rewritten"
        cursor = _Cursor(
            db,
            key,
            path,
            fmt(self.options.reader, path, start.state.get("reader", {}), start.offset),
            _Sessions(db, start.state.get("seq", {}), merge_all=start.rewritten),
            _Window(start.head, start.tail),
            start.offset,
            int(start.state.get("line", 0)),
            start.events,
        )
        pending: list[Turn] = []
        replays = ReplayFilter(db)
        try:
            for raw, end in complete_lines(path, start.offset, take_last=fmt.take_unterminated):
                cursor.line += 1
                cursor.window.add(raw)
                self._take(cursor.reader.read(raw, cursor.line), pending, report)
                cursor.offset = end
                if len(pending) >= CHUNK_EVENTS:
                    self._store(project, cursor.sessions, pending, report, replays)
                    self._save(cursor, report, replays)
                    if progress is not None:
                        progress(str(path), cursor.offset, now.size)
        except DAMAGED_COMPRESSION:
            # Everything before the damage is stored below; the next import stops at the same place.
            report.status = "failed"
            report.problem("read_error", cursor.line + 1, "the compressed data is damaged from here on")
        self._take(cursor.reader.finish(), pending, report)
        self._store(project, cursor.sessions, pending, report, replays)
        report.bytes_read = cursor.offset - start.offset
        self._save(cursor, report, replays)
        if progress is not None:
            progress(str(path), now.size, now.size)

    def _take(self, items: Iterable[_Read | Skip], pending: list[_Read], report: FileReport) -> None:
        """Keep what a reader read (turns, or whole sessions of a document format); count or report its skips."""
        for item in items:
            if isinstance(item, Skip):
                if item.problem:
                    report.problem(item.reason, item.line, item.detail)
                else:
                    report.skipped[item.reason] += 1
            else:
                pending.append(item)

    def _save(self, cursor: _Cursor, report: FileReport, replays: ReplayFilter) -> None:
        """The record ids of the chunk just stored and the watermark at the cursor, in one transaction
        (one commit per chunk rather than two), after the events before it were committed."""
        with cursor.db.write():
            replays.commit()
            mark = self._watermark(cursor, report)
            if mark is not None:
                save_watermark(cursor.db, mark)

    def _watermark(self, cursor: _Cursor, report: FileReport) -> Watermark | None:
        """The watermark at the cursor, or None for a file that is gone."""
        try:
            now = stamp(cursor.path)
        except FileNotFoundError:
            if report.status == "missing":
                return None
            # Deleted while it was read (the open file still read to its end): what was read is stored,
            # and a file that is gone needs no watermark.
            report.status = "missing"
            report.problem(
                "file_missing", cursor.line, "the file disappeared while it was read; what was read is stored"
            )
            return None
        head, tail = cursor.window.checksums()
        state = {"reader": cursor.reader.state(), "seq": cursor.sessions.next, "line": cursor.line}
        # The size and time of the file as consumed; a file that grew meanwhile (or ends in a line being
        # written) gets no time, so the next import looks at it again.
        consumed_all = cursor.offset >= now.size or is_compressed(cursor.path)
        size, mtime = (now.size, now.mtime_ns) if consumed_all else (cursor.offset, 0)
        events = cursor.stored_before + report.added
        return Watermark(self.source, cursor.key, cursor.offset, size, mtime, head, tail, state, events)

    # -- storing ---------------------------------------------------------------------------------------

    def _store(
        self,
        project: str,
        sessions: _Sessions,
        turns: list[Turn],
        report: FileReport,
        replays: ReplayFilter | None = None,
    ) -> None:
        """Validate, number and append the pending events, session by session (in file order); ``turns``
        is emptied. Records imported before (``replays``) are left out; the caller remembers the chunk's
        record ids with its watermark (:meth:`_save`)."""
        candidates = replays.fresh(list(turns), report.skipped) if replays is not None else list(turns)
        if replays is not None:
            sessions.discount(replays.take_stored_here())
        turns.clear()
        by_session: dict[str, list[tuple[Turn, EventIn]]] = {}
        for turn in candidates:
            event = self._event(turn, report)
            if event is None:
                continue
            report.events += 1
            by_session.setdefault(turn.session_id, []).append((turn, event))
        for session, items in by_session.items():
            report.line = items[0][0].line
            try:
                self._append_session(project, sessions, session, [event for _, event in items], report)
            except ObsmemError as exc:
                if exc.code in ("invalid_session", "invalid_request"):
                    report.problem(exc.code, items[0][0].line, exc.message)
                    continue
                raise

    def _event(self, turn: Turn, report: FileReport) -> EventIn | None:
        """The turn as a valid event, or None (reported). A timestamp obsmem cannot read is dropped, and
        the event stored with the time it is imported, rather than losing the event."""
        try:
            return EventIn.model_validate(turn.event)
        except ValidationError as exc:
            problem = first_problem(exc, f"line {turn.line}")
        if problem.field is not None and problem.field.endswith("created_at"):
            try:
                event = EventIn.model_validate({k: v for k, v in turn.event.items() if k != "created_at"})
            except ValidationError:
                pass
            else:
                report.problem(
                    "invalid_timestamp", turn.line, "a timestamp obsmem cannot read; stored with the time of the import"
                )
                return event
        report.problem("invalid_event", turn.line, problem.message)
        return None

    def _append_session(
        self, project: str, sessions: _Sessions, session: str, events: list[EventIn], report: FileReport
    ) -> None:
        report.sessions.add(session)
        if not sessions.is_merging(session):
            numbered = [sessions.assign(session, event) for event in events]
            try:
                receipt = self.append(project, session, numbered)
            except SeqConflict:
                sessions.start_merge(session)
            else:
                report.added += receipt.appended
                report.duplicates += receipt.duplicates
                return
        seen = sessions.merging[session]
        fresh: list[EventIn] = []
        for event in events:
            fingerprint = _fingerprint(event)
            if seen[fingerprint] > 0:
                seen[fingerprint] -= 1
                report.duplicates += 1
            else:
                fresh.append(event.model_copy(update={"seq": None}))
        if fresh:
            receipt = self.append(project, session, fresh)
            report.added += receipt.appended
            sessions.next[session] = receipt.last_seq + 1

    # -- document formats ------------------------------------------------------------------------------

    def _document_file(self, path: Path, report: FileReport) -> None:
        key = str(path.resolve())
        now = stamp(path)
        if self._unchanged_chat(path, key, now, report):
            return
        fmt = self._document_format(path)
        docs: list[SessionDoc] = []
        self._take(fmt.sessions(), docs, report)
        by_project: dict[str, list[SessionDoc]] = {}
        for doc in docs:
            project = self._project_of(doc)
            if project is None:
                report.problem("no_project", 0, "a session records no working directory; pass --project")
                continue
            by_project.setdefault(project, []).append(doc)
        for project, project_docs in by_project.items():
            report.projects.add(project)
            db = self.database(project)
            mark = load_watermark(db, self.source, key)
            if mark is not None and (now.size, now.mtime_ns) == (mark.size, mark.mtime_ns):
                report.status = "unchanged"
                continue
            saved: dict[str, Any] = dict(mark.state.get("sessions", {})) if mark is not None else {}
            added_before = report.added
            for doc in project_docs:
                saved[doc.session_id] = self._document_session(project, db, doc, saved.get(doc.session_id), report)
            total = report.added - added_before + (mark.events if mark is not None else 0)
            mtime = now.mtime_ns if fmt.read_whole else 0  # no time: a partial read is looked at again
            save_watermark(db, Watermark(self.source, key, 0, now.size, mtime, "", "", {"sessions": saved}, total))

    def _unchanged_chat(self, path: Path, key: str, now: FileStamp, report: FileReport) -> bool:
        """A Gemini CLI chat whose folder names its project hash, unchanged since its import: passed over
        without being parsed (other document files are parsed first to learn their projects)."""
        project_hash = path.parent.parent.name
        if self.source != "gemini-cli" or not _SHA256.fullmatch(project_hash):
            return False
        project = self.options.project or project_for_hash(project_hash, self.project_map)
        mark = load_watermark(self.database(project), self.source, key)
        if mark is None or (now.size, now.mtime_ns) != (mark.size, mark.mtime_ns):
            return False
        report.projects.add(project)
        report.status = "unchanged"
        return True

    def _document_format(self, path: Path) -> DocumentFormat:
        if self.source == "gemini-cli":
            return GeminiCliFormat(self.options.reader, path)
        if path.suffix == ".json":
            return OpencodeTreeFormat(self.options.reader, path)
        return OpencodeDatabaseFormat(self.options.reader, path)

    def _project_of(self, doc: SessionDoc) -> str | None:
        if self.options.project is not None:
            return self.options.project
        if doc.project_hash is not None and doc.cwd is None:
            return project_for_hash(doc.project_hash, self.project_map)
        return project_for_cwd(doc.cwd, self.project_map)

    def _document_session(
        self, project: str, db: ProjectDatabase, doc: SessionDoc, saved: Any, report: FileReport
    ) -> dict[str, Any]:
        keys = [turn.key for turn in doc.turns]
        stored = int(saved.get("n", 0)) if isinstance(saved, dict) else 0
        resumes = (
            isinstance(saved, dict) and stored <= len(keys) and (stored == 0 or keys[stored - 1] == saved.get("last"))
        )
        sessions = _Sessions(
            db,
            {doc.session_id: int(saved["seq"])} if resumes and "seq" in saved else {},
            not resumes and saved is not None,
        )
        if saved is not None and not resumes:
            report.status = "rewritten"
        new = doc.turns[stored:] if resumes else doc.turns
        if not resumes and isinstance(saved, dict) and "seq" in saved and self.source == "gemini-cli":
            new = self._rewound(db, sessions, doc, int(saved["seq"]) - 1, report)
        report.sessions.add(doc.session_id)
        self._store(project, sessions, list(new), report)
        if not keys:
            return {"n": 0, "last": None, "seq": sessions.next.get(doc.session_id, 1)}
        if doc.session_id not in sessions.next:
            with db.read() as conn:
                sessions.next[doc.session_id] = last_seq(conn, doc.session_id) + 1
        return {"n": len(keys), "last": keys[-1], "seq": sessions.next[doc.session_id]}

    def _rewound(
        self, db: ProjectDatabase, sessions: _Sessions, doc: SessionDoc, held: int, report: FileReport
    ) -> list[Turn]:
        """A session rewound since its last import: merged in order (see :mod:`obsmem.transcripts.rewinds`);
        the turns left to store, their merge counts set in ``sessions``."""
        same, rest = in_order_merge(db, doc.session_id, [_stored_fingerprint(t) for t in doc.turns], held)
        sessions.merging[doc.session_id] = rest
        report.events += same
        report.duplicates += same
        return doc.turns[same:]


@dataclass
class _Cursor:
    """How far one import of a line file got: what the next watermark records."""

    db: ProjectDatabase
    key: str
    path: Path
    reader: LineFormat
    sessions: _Sessions
    window: _Window
    offset: int
    line: int
    stored_before: int


@dataclass
class _Resume:
    """Where a line file's import starts: its offset, the reader state there and the prefix windows."""

    offset: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    rewritten: bool = False
    head: bytes = b""
    tail: bytes = b""
    events: int = 0  # events the watermark says were stored from the file so far

    @classmethod
    def check(cls, path: Path, mark: Watermark | None) -> _Resume:
        if mark is None or mark.offset == 0:
            return cls()
        head, tail = _prefix_windows(path, mark.offset)
        window = _Window(head, tail)
        if (mark.head_sha256, mark.tail_sha256) == window.checksums():
            return cls(mark.offset, mark.state, False, head, tail, mark.events)
        return cls(rewritten=True, events=mark.events)


class _Window:
    """The first and the last 64 KiB of the consumed bytes, kept as lines are consumed."""

    def __init__(self, head: bytes, tail: bytes) -> None:
        self.head = bytearray(head)
        self.tail = bytearray(tail)

    def add(self, raw: bytes) -> None:
        if len(self.head) < WINDOW:
            self.head += raw[: WINDOW - len(self.head)]
        self.tail += raw
        if len(self.tail) > 4 * WINDOW:
            del self.tail[: len(self.tail) - WINDOW]

    def checksums(self) -> tuple[str, str]:
        if not self.head:
            return "", ""
        return hashlib.sha256(self.head).hexdigest(), hashlib.sha256(self.tail[-WINDOW:]).hexdigest()


def _prefix_windows(path: Path, offset: int) -> tuple[bytes, bytes]:
    """The first and last 64 KiB of the file's first ``offset`` bytes (short if the file is shorter)."""
    start = max(offset - WINDOW, 0)
    with open_text_bytes(path) as handle:
        if not is_compressed(path):
            head = handle.read(min(offset, WINDOW))
            handle.seek(start)
            return head, handle.read(offset - start)
        head, tail, position = b"", bytearray(), 0
        while position < offset:
            chunk = handle.read(min(1 << 20, offset - position))
            if not chunk:
                break
            if position < WINDOW:
                head += chunk[: WINDOW - position]
            if position + len(chunk) > start:
                tail += chunk[max(start - position, 0) :]
            position += len(chunk)
        return head[: min(offset, WINDOW)], bytes(tail)
