"""Import transcript files into projects, incrementally and idempotently.

Every event goes through the app's append (``append``: the Observer's trigger) validated and redacted
(:func:`~obsmem.transcripts.reading.prepare_turn`), in batches of up to :data:`CHUNK_EVENTS` events per
session; the importer only decides which records are new and which seq each event gets.

Line files are read in chunks of :data:`CHUNK_EVENTS` events (:func:`~obsmem.transcripts.reading.read_chunks`).
A large import (``reading_min_bytes`` left to read) hands the files in turn to ``reading_processes``
reading processes (:mod:`~obsmem.transcripts.reading_process`), which read and prepare the chunks of
the next files while this process stores the current one; a chunk is stored, and its watermark saved,
in file order exactly as when it is read here, so the two ways store the same.

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

Imports of one file take turns (:func:`~obsmem.transcripts.files.import_lock`, held while the file is
stored): a line file planned before another import stored some of it is planned again from that
import's watermark when its turn comes.

Document formats (rewritten files, databases) are read whole; per session the watermark records how many
events were stored and the key of the last one, and the events after it are appended. A session whose
stored prefix no longer matches is merged as in 3.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from obsmem.errors import ObsmemError, SeqConflict, StorageError, ValidationFailed
from obsmem.events import AppendReceipt, PreparedEvent, event_fingerprints, last_seq
from obsmem.storage import ProjectDatabase
from obsmem.transcripts.files import (
    DAMAGED_COMPRESSION,
    WINDOW,
    FileBusy,
    FileStamp,
    NotARegularFile,
    import_lock,
    is_compressed,
    open_text_bytes,
    stamp,
)
from obsmem.transcripts.formats import DocumentFormat
from obsmem.transcripts.gemini_cli import GeminiCliFormat
from obsmem.transcripts.mapping import project_for_cwd, project_for_hash
from obsmem.transcripts.opencode import OpencodeDatabaseFormat, OpencodeTreeFormat
from obsmem.transcripts.reading import LINE_FORMATS, Chunk, LineJob, ReadTurn, Window, prepare_turn, read_chunks
from obsmem.transcripts.reading_process import Reader, ReadingFailed, ReadingProcesses
from obsmem.transcripts.records import ReaderOptions, SessionDoc, Skip
from obsmem.transcripts.replays import ReplayFilter
from obsmem.transcripts.reports import FileReport, ImportRun
from obsmem.transcripts.rewinds import in_order_merge
from obsmem.transcripts.watermarks import (
    ImportTarget,
    UnsavedWatermarks,
    Watermark,
    load_watermark,
    save_watermark,
    watermark_key,
)
from obsmem.validation import session_id as check_session_id

CHUNK_EVENTS = 5000
_SHA256 = re.compile(r"[0-9a-f]{64}")
DOCUMENT_SOURCES = ("gemini-cli", "opencode")
# Line files handed to each reading process at once (small jobs: the chunks they become are what is bounded,
# see reading_process.AHEAD); four rather than two absorb the other processes' scheduling on a loaded machine.
_JOBS_AHEAD = 4
# The first files of a run are read here while the reading processes start (a few tenths of a second):
# at most this much, and an eighth of the run.
_HEAD_START_BYTES = 12 * 1024 * 1024

Append = Callable[[str, str, list[PreparedEvent], list[int | None] | None], AppendReceipt]
"""``append(project, session_id, events, seqs)``: the app's append of prepared events (validated and
redacted, see :func:`obsmem.transcripts.reading.prepare_turn`), with the Observer's trigger."""
OpenDatabase = Callable[[str], ProjectDatabase]
"""``database(project)``: an existing project's database, ``ProjectNotFound`` for one that does not exist
(an import that stores nothing creates no project: the append creates it with the first event)."""
FileProgress = Callable[[str, int, int], None]
"""Called as ``(path, bytes done, bytes total)`` while a file is read."""


@dataclass(frozen=True)
class ImportOptions:
    """What the ``[transcripts]`` settings decide, and ``--project``."""

    reader: ReaderOptions = ReaderOptions()
    project_map: Mapping[str, str] | None = None
    project: str | None = None
    reading_processes: int = 0  # line files read by this many processes beside this one (see reading_process)
    reading_min_bytes: int = 8 * 1024 * 1024  # ... when at least this much is left to read


def _stored_fingerprint(turn: ReadTurn) -> str | None:
    """The fingerprint the turn's event has (or had) when stored: the one its prepared event carries; None
    for one that is not valid, which is never stored (reported where it is stored, not here)."""
    return turn.event.fingerprint if turn.event is not None else None


class _Sessions:
    """Seqs of the sessions one file feeds, and the sessions being merged (see the module docstring)."""

    def __init__(self, target: ImportTarget, saved: dict[str, int], merge_all: bool) -> None:
        self.target = target
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
        db = self.target.existing()
        if db is None:
            self.merging[session] = Counter()  # a project not made yet holds no events
            return
        with db.read() as conn:
            self.merging[session] = Counter(event_fingerprints(conn, session))

    def discount(self, stored: list[ReadTurn]) -> None:
        """Take the events of records a merging session already holds (known by record id, left out)
        out of its counts, so only events stored without an id to match them by are matched by content."""
        for turn in stored:
            fingerprint = _stored_fingerprint(turn) if self.is_merging(turn.session_id) else None
            if fingerprint is not None:
                self.merging[turn.session_id][fingerprint] -= 1

    def assign(self, session: str, events: list[PreparedEvent]) -> list[int | None]:
        """The seqs of the session's next events (an event's own seq is kept)."""
        # A session this file has not numbered yet starts at 1, not after what is stored: numbering then
        # depends on the file alone, so events stored before a watermark was lost are duplicates again.
        # A session that already holds other events meets them as a seq_conflict and is merged.
        following = self.next.get(session, 1)
        seqs: list[int | None] = []
        for event in events:
            if event.seq is not None:
                following = max(following, event.seq + 1)
                seqs.append(event.seq)
            else:
                seqs.append(following)
                following += 1
        self.next[session] = following
        return seqs


class TranscriptImporter:
    """Imports the files of one source (see the module docstring)."""

    def __init__(
        self,
        source: str,
        options: ImportOptions,
        append: Append,
        database: OpenDatabase,
        unsaved: UnsavedWatermarks | None = None,
    ) -> None:
        if source not in LINE_FORMATS and source not in DOCUMENT_SOURCES:
            known = ", ".join([*LINE_FORMATS, *DOCUMENT_SOURCES])
            raise ValidationFailed(f"source must be one of {known}", field="source")
        self.source = source
        self.options = options
        self.project_map: Mapping[str, str] = options.project_map or {}
        self.append = append
        self.database = database
        # Watermarks of files that stored nothing in a project not made yet (see UnsavedWatermarks).
        self.unsaved = unsaved if unsaved is not None else UnsavedWatermarks()

    def run(self, paths: Sequence[Path], progress: FileProgress | None = None) -> ImportRun:
        try:
            return self._run(paths, progress)
        finally:
            self.unsaved.prune()

    def _run(self, paths: Sequence[Path], progress: FileProgress | None) -> ImportRun:
        result = ImportRun(self.source)
        if self.source not in LINE_FORMATS:
            for path in paths:
                result.files.append(self.import_file(path, progress))
            return result
        # Line files are all looked at first (their watermarks say what is left to read), so a large
        # import can be read in a second process while this one stores (see reading_process).
        plans: list[_LinePlan] = []
        keys: set[str] = set()
        for path in paths:
            plan = _LinePlan(path, FileReport(str(path), self.source))
            result.files.append(plan.report)
            _guarded(plan.report, self._plan_line_file, plan, keys)
            plans.append(plan)
        left = sum(plan.left for plan in plans if plan.job is not None)
        use_processes = left > 0 and self.options.reading_min_bytes <= left and self.options.reading_processes > 0
        if use_processes:
            _head_start(plans, min(left // 8, _HEAD_START_BYTES))
        with _Readers(self.options.reading_processes if use_processes else 0) as readers:
            for index, plan in enumerate(plans):
                if plan.deferred and not _guarded(plan.report, self._plan_line_file, plan, None):
                    continue  # the same file named twice: looked at once the first is stored
                if plan.job is None:
                    continue
                with ExitStack() as held:
                    if not _guarded(plan.report, self._take_turn, plan, held, readers) or plan.job is None:
                        readers.withdraw(plan)
                        continue
                    readers.submit_until(plans, index)
                    stream = readers.stream(plan)
                    _guarded(plan.report, self._store_line_file, plan, stream, progress)
                    readers.finish(stream)
        return result

    def import_file(self, path: Path, progress: FileProgress | None = None) -> FileReport:
        if self.source in LINE_FORMATS:
            return self.run([path], progress).files[0]
        report = FileReport(str(path), self.source)
        _guarded(report, self._document_file, path, report)
        return report

    # -- line formats ----------------------------------------------------------------------------------

    def _take_turn(self, plan: _LinePlan, held: ExitStack, readers: _Readers) -> bool:
        """Hold the file's import lock (:func:`~obsmem.transcripts.files.import_lock`) for ``held``; if
        another import stored some of the file since it was planned, plan it again from that import's
        watermark (a reading process handed the old plan has its chunks dropped)."""
        held.enter_context(import_lock(plan.path))
        if self._load_watermark(plan.target, plan.key) == plan.mark:
            return True
        readers.withdraw(plan)
        plan.job, plan.report.status = None, "imported"
        self._plan_line_file(plan, None)
        return True

    def _load_watermark(self, target: ImportTarget, key: str) -> Watermark | None:
        """The file's watermark in its project, else the one kept in memory while it stored nothing there."""
        mark = load_watermark(target.existing(), self.source, key)
        return mark if mark is not None else self.unsaved.get(target.name, self.source, key)

    def _plan_line_file(self, plan: _LinePlan, keys: set[str] | None) -> bool:
        """Where the file's import starts (``plan.job``), or False when there is nothing to read. A file
        named twice (``keys`` holds those planned already) is planned when its turn comes."""
        path, report = plan.path, plan.report
        key = watermark_key(path)
        if keys is not None:
            if key in keys:
                plan.deferred = True
                return True
            keys.add(key)
        fmt = LINE_FORMATS[self.source]
        project = self.options.project or project_for_cwd(
            fmt(self.options.reader, path, {}).project_cwd(), self.project_map
        )
        if project is None:
            report.status = "failed"
            report.problem("no_project", 0, "the transcript records no working directory; pass --project")
            return False
        report.projects.add(project)
        target = ImportTarget(project, self.database)
        mark = self._load_watermark(target, key)
        plan.target, plan.mark = target, mark
        now = stamp(path)
        if mark is not None and (now.size, now.mtime_ns) == (mark.size, mark.mtime_ns):
            report.status = "unchanged"
            return False
        start = _Resume.check(path, mark)
        if start.rewritten:
            report.status = "rewritten"
        plan.project, plan.key, plan.now, plan.start = project, key, now, start
        plan.left = max(now.size - start.offset, 0)
        plan.job = LineJob(
            self.source,
            str(path),
            self.options.reader,
            start.state.get("reader", {}),
            start.offset,
            int(start.state.get("line", 0)),
            start.head,
            start.tail,
            CHUNK_EVENTS,
        )
        plan.deferred = False
        return True

    def _store_line_file(self, plan: _LinePlan, chunks: Iterable[Chunk], progress: FileProgress | None) -> None:
        """Store the file's chunks in order, each followed by its watermark (see the module docstring)."""
        report, start = plan.report, plan.start
        sessions = _Sessions(plan.target, start.state.get("seq", {}), merge_all=start.rewritten)
        replays = ReplayFilter(plan.target)
        for chunk in chunks:
            report.skipped.update(chunk.skipped)
            for skip in chunk.problems:
                report.problem(skip.reason, skip.line, skip.detail)
            if chunk.error is not None:
                raise chunk.error  # what was read before it is stored; the rest waits for the next import
            if chunk.damaged:
                report.status = "failed"
            self._store(plan.project, sessions, chunk.turns, report, replays)
            if chunk.final:
                report.bytes_read = chunk.offset - start.offset
            self._save(plan, chunk, sessions, report, replays)
            if progress is not None:
                progress(str(plan.path), plan.now.size if chunk.final else chunk.offset, plan.now.size)

    def _save(
        self, plan: _LinePlan, chunk: Chunk, sessions: _Sessions, report: FileReport, replays: ReplayFilter
    ) -> None:
        """The record ids of the chunk just stored and the watermark after it, in one transaction
        (one commit per chunk rather than two), after the events before it were committed. While the
        project does not exist nothing was stored, and the watermark is kept in memory (``unsaved``)."""
        db = plan.target.existing()
        if db is None:
            mark = self._watermark(plan, chunk, sessions, report)
            if mark is not None:
                self.unsaved.put(plan.target.name, mark)
            return
        with db.write():
            replays.commit()
            mark = self._watermark(plan, chunk, sessions, report)
            if mark is not None:
                save_watermark(db, mark)
        self.unsaved.drop(plan.target.name, self.source, plan.key)

    def _watermark(self, plan: _LinePlan, chunk: Chunk, sessions: _Sessions, report: FileReport) -> Watermark | None:
        """The watermark after the chunk, or None for a file that is gone."""
        try:
            now = stamp(plan.path)
        except FileNotFoundError:
            if report.status == "missing":
                return None
            # Deleted while it was read (the open file still read to its end): what was read is stored,
            # and a file that is gone needs no watermark.
            report.status = "missing"
            report.problem(
                "file_missing", chunk.line, "the file disappeared while it was read; what was read is stored"
            )
            return None
        head, tail = chunk.checksums
        state = {"reader": chunk.reader_state, "seq": sessions.next, "line": chunk.line}
        # The size and time of the file as consumed; a file that grew meanwhile (or ends in a line being
        # written) gets no time, so the next import looks at it again.
        consumed_all = chunk.offset >= now.size or is_compressed(plan.path)
        size, mtime = (now.size, now.mtime_ns) if consumed_all else (chunk.offset, 0)
        events = plan.start.events + report.added
        return Watermark(self.source, plan.key, chunk.offset, size, mtime, head, tail, state, events)

    # -- storing ---------------------------------------------------------------------------------------

    def _store(
        self,
        project: str,
        sessions: _Sessions,
        turns: list[ReadTurn],
        report: FileReport,
        replays: ReplayFilter | None = None,
    ) -> None:
        """Append the read events, session by session (in file order). Records imported before
        (``replays``) are left out; the caller remembers the chunk's record ids with its watermark
        (:meth:`_save`)."""
        candidates = replays.fresh(turns, report.skipped) if replays is not None else turns
        if replays is not None:
            sessions.discount(replays.take_stored_here())
        by_session: dict[str, list[PreparedEvent]] = {}
        first_line: dict[str, int] = {}
        for turn in candidates:
            if turn.problem is not None:
                report.problem(turn.problem, turn.line, turn.detail)
            event = turn.event
            if event is None:
                continue
            report.events += 1
            events = by_session.get(turn.session_id)
            if events is None:
                events = by_session[turn.session_id] = []
                first_line[turn.session_id] = turn.line
            events.append(event)
        for session, events in by_session.items():
            report.line = first_line[session]
            try:
                self._append_session(project, sessions, session, events, report)
            except ObsmemError as exc:
                if exc.code in ("invalid_session", "invalid_request"):
                    report.problem(exc.code, first_line[session], exc.message)
                    continue
                raise

    def _append_session(
        self, project: str, sessions: _Sessions, session: str, events: list[PreparedEvent], report: FileReport
    ) -> None:
        # Checked before the session is listed: a receipt names only well-formed ids (a transcript's id may
        # hold anything, a pasted credential too); a bad one is a problem of its line, raised from here.
        check_session_id(session)
        report.sessions.add(session)
        if not sessions.is_merging(session):
            seqs = sessions.assign(session, events)
            try:
                receipt = self.append(project, session, events, seqs)
            except SeqConflict:
                sessions.start_merge(session)
            else:
                report.added += receipt.appended
                report.duplicates += receipt.duplicates
                return
        seen = sessions.merging[session]
        fresh: list[PreparedEvent] = []
        for event in events:
            if seen[event.fingerprint] > 0:
                seen[event.fingerprint] -= 1
                report.duplicates += 1
            else:
                fresh.append(event)
        if fresh:
            receipt = self.append(project, session, fresh, [None] * len(fresh))
            report.added += receipt.appended
            sessions.next[session] = receipt.last_seq + 1

    # -- document formats ------------------------------------------------------------------------------

    def _document_file(self, path: Path, report: FileReport) -> None:
        with import_lock(path):  # imports of one file take turns (see import_lock)
            self._document_file_locked(path, report)

    def _document_file_locked(self, path: Path, report: FileReport) -> None:
        key = watermark_key(path)
        fmt = self._document_format(path)
        now = fmt.stamp()
        if self._unchanged_chat(path, key, now, report):
            return
        docs: list[SessionDoc] = []
        for item in fmt.sessions():
            if not isinstance(item, Skip):
                docs.append(item)
            elif item.problem:
                report.problem(item.reason, item.line, item.detail)
            else:
                report.skipped[item.reason] += 1
        by_project: dict[str, list[SessionDoc]] = {}
        for doc in docs:
            project = self._project_of(doc)
            if project is None:
                report.problem("no_project", 0, "a session records no working directory; pass --project")
                continue
            by_project.setdefault(project, []).append(doc)
        for project, project_docs in by_project.items():
            report.projects.add(project)
            target = ImportTarget(project, self.database)
            mark = self._load_watermark(target, key)
            if mark is not None and (now.size, now.mtime_ns) == (mark.size, mark.mtime_ns):
                report.status = "unchanged"
                continue
            saved: dict[str, Any] = dict(mark.state.get("sessions", {})) if mark is not None else {}
            added_before = report.added
            for doc in project_docs:
                saved[doc.session_id] = self._document_session(project, target, doc, saved.get(doc.session_id), report)
            total = report.added - added_before + (mark.events if mark is not None else 0)
            mtime = now.mtime_ns if fmt.read_whole else 0  # no time: a partial read is looked at again
            db = target.existing()
            mark = Watermark(self.source, key, 0, now.size, mtime, "", "", {"sessions": saved}, total)
            if db is None:  # nothing was stored, and no project made to hold the watermark
                self.unsaved.put(project, mark)
            else:
                save_watermark(db, mark)
                self.unsaved.drop(project, self.source, key)

    def _unchanged_chat(self, path: Path, key: str, now: FileStamp, report: FileReport) -> bool:
        """A Gemini CLI chat whose folder names its project hash, unchanged since its import: passed over
        without being parsed (other document files are parsed first to learn their projects)."""
        project_hash = path.parent.parent.name
        if self.source != "gemini-cli" or not _SHA256.fullmatch(project_hash):
            return False
        project = self.options.project or project_for_hash(project_hash, self.project_map)
        mark = self._load_watermark(ImportTarget(project, self.database), key)
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
        self, project: str, target: ImportTarget, doc: SessionDoc, saved: Any, report: FileReport
    ) -> dict[str, Any]:
        keys = [turn.key for turn in doc.turns]
        stored = int(saved.get("n", 0)) if isinstance(saved, dict) else 0
        resumes = (
            isinstance(saved, dict) and stored <= len(keys) and (stored == 0 or keys[stored - 1] == saved.get("last"))
        )
        sessions = _Sessions(
            target,
            {doc.session_id: int(saved["seq"])} if resumes and "seq" in saved else {},
            not resumes and saved is not None,
        )
        if saved is not None and not resumes:
            report.status = "rewritten"
        new = [prepare_turn(turn) for turn in (doc.turns[stored:] if resumes else doc.turns)]
        rewound = not resumes and isinstance(saved, dict) and "seq" in saved and self.source == "gemini-cli"
        db = target.existing()  # not None for a session saved before: its project exists
        if rewound and db is not None:
            new = self._rewound(db, sessions, doc.session_id, new, int(saved["seq"]) - 1, report)
        if _well_formed(doc.session_id):  # a bad one is reported by _store, and never listed
            report.sessions.add(doc.session_id)
        self._store(project, sessions, new, report)
        if not keys:
            return {"n": 0, "last": None, "seq": sessions.next.get(doc.session_id, 1)}
        if doc.session_id not in sessions.next:
            db = target.existing()
            if db is None:
                sessions.next[doc.session_id] = 1  # nothing stored: the project was not made
            else:
                with db.read() as conn:
                    sessions.next[doc.session_id] = last_seq(conn, doc.session_id) + 1
        return {"n": len(keys), "last": keys[-1], "seq": sessions.next[doc.session_id]}

    def _rewound(
        self,
        db: ProjectDatabase,
        sessions: _Sessions,
        session: str,
        turns: list[ReadTurn],
        held: int,
        report: FileReport,
    ) -> list[ReadTurn]:
        """A session rewound since its last import (``turns``: all of it, prepared): merged in order (see
        :mod:`obsmem.transcripts.rewinds`); the turns left to store, their merge counts set in ``sessions``."""
        same, rest = in_order_merge(db, session, [_stored_fingerprint(turn) for turn in turns], held)
        sessions.merging[session] = rest
        report.events += same
        report.duplicates += same
        return turns[same:]


@dataclass
class _LinePlan:
    """One line file of a run: its report, and once looked at, where its import starts (``job``)."""

    path: Path
    report: FileReport
    job: LineJob | None = None  # None: nothing to read (unchanged, no project, gone)
    deferred: bool = False  # named twice in the run: looked at when its turn comes
    reader: int | None = None  # the reading process it was handed to
    inline: bool = False  # read here while the reading processes start
    project: str = ""
    target: ImportTarget = field(init=False)
    mark: Watermark | None = None  # the watermark it was planned from
    key: str = ""
    now: FileStamp = FileStamp(0, 0)
    start: _Resume = field(default_factory=lambda: _Resume())
    left: int = 0  # bytes after the watermark


def _head_start(plans: Sequence[_LinePlan], budget: int) -> None:
    """Mark the first files, up to ``budget`` bytes in all, to be read here rather than handed over."""
    for plan in plans:
        if plan.job is None or plan.deferred:
            continue
        if plan.left > budget:
            return
        budget -= plan.left
        plan.inline = True


def _guarded(report: FileReport, action: Callable[..., Any], *args: Any) -> Any:
    """Run one step of a file's import; a file that cannot be read is reported, and the run goes on to
    the next file (what was stored before the failure stays stored). Returns False after a failure."""
    try:
        return action(*args)
    except FileBusy as exc:
        report.status = "failed"
        report.problem("file_busy", 0, exc.strerror or "the file's import lock is held")
    except FileNotFoundError:
        report.status = "missing"
        report.problem("file_missing", 0, "the file disappeared before it could be read")
    except (IsADirectoryError, PermissionError, NotARegularFile) as exc:
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
    return False


class _Readers:
    """Where each line file's chunks come from: :func:`read_chunks` in this process, or reading
    processes, handed the files in turn, each up to :data:`_JOBS_AHEAD` files ahead of the one being
    stored. If one fails, the rest of the run reads in-process, a file cut short from the chunk it got to."""

    def __init__(self, processes: int) -> None:
        self.wanted = processes
        self.group: ReadingProcesses | None = None
        self.processes: list[Reader] = []
        self.outstanding: list[int] = []
        self.cursor = 0  # the next plan to consider handing over
        self.handed = 0  # files handed over so far (the next goes to process handed % len)

    def __enter__(self) -> _Readers:
        if self.wanted > 0 and hasattr(os, "fork"):  # the processes are forked from one (POSIX)
            try:
                self.group = ReadingProcesses(self.wanted)
            except (OSError, ValueError):  # no process can be started here: read in-process
                self.group = None
            else:
                self.processes = self.group.readers
                self.outstanding = [0] * len(self.processes)
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if self.group is not None:
            self.group.close(abandon=error is not None)
        self.group, self.processes = None, []

    def fail(self) -> None:
        if self.group is not None:
            self.group.close(abandon=True)
        self.group, self.processes = None, []

    def submit_until(self, plans: Sequence[_LinePlan], index: int) -> None:
        """Hand over the files from ``index`` on, while their process has fewer than :data:`_JOBS_AHEAD`."""
        self.cursor = max(self.cursor, index)
        while self.processes and self.cursor < len(plans):
            plan = plans[self.cursor]
            if plan.job is None or plan.deferred or plan.inline:
                self.cursor += 1
                continue
            reader = self.handed % len(self.processes)
            if self.outstanding[reader] >= _JOBS_AHEAD:
                return
            try:
                self.processes[reader].submit(plan.job)
            except ReadingFailed:
                self.fail()
                return
            plan.reader = reader
            self.outstanding[reader] += 1
            self.handed += 1
            self.cursor += 1

    def withdraw(self, plan: _LinePlan) -> None:
        """A file handed over that is not read as it was handed (it is gone, or another import moved its
        watermark): its chunks are read off the process and dropped, and it is read here if at all."""
        process = self.process_for(plan)
        if process is not None and plan.reader is not None:
            self.outstanding[plan.reader] -= 1
            try:
                for _ in process.chunks():
                    pass
            except ReadingFailed:
                self.fail()
        plan.reader = None

    def process_for(self, plan: _LinePlan) -> Reader | None:
        return self.processes[plan.reader] if plan.reader is not None and self.processes else None

    def stream(self, plan: _LinePlan) -> _ChunkStream:
        return _ChunkStream(self, plan)

    def finish(self, stream: _ChunkStream) -> None:
        """After a file's import: a file cut short by an error leaves chunks in the pipe; read them off."""
        process = self.process_for(stream.plan)
        if process is None or stream.plan.reader is None:
            return
        self.outstanding[stream.plan.reader] -= 1
        if stream.finished:
            return
        try:
            for _ in process.chunks():
                pass
        except ReadingFailed:
            self.fail()


class _ChunkStream:
    """A file's chunks, from the reading process it was handed to, else read here."""

    def __init__(self, readers: _Readers, plan: _LinePlan) -> None:
        self.readers = readers
        self.plan = plan
        self.finished = False
        self.delivered = 0

    def __iter__(self) -> Iterator[Chunk]:
        job = self.plan.job
        assert job is not None
        process = self.readers.process_for(self.plan)
        if process is not None:
            try:
                for chunk in process.chunks():
                    self.delivered += 1
                    self.finished = chunk.final
                    yield chunk
                return
            except ReadingFailed:
                self.readers.fail()
        # Read here, from the chunk the process got to (reading is deterministic up to the file's end).
        for index, chunk in enumerate(read_chunks(job)):
            if index >= self.delivered:
                yield chunk
        self.finished = True


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
        window = Window(head, tail)
        if (mark.head_sha256, mark.tail_sha256) == window.checksums():
            return cls(mark.offset, mark.state, False, head, tail, mark.events)
        return cls(rewritten=True, events=mark.events)


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


def _well_formed(session: str) -> bool:
    """Whether ``session`` is an id obsmem stores (and so may name in a receipt)."""
    try:
        check_session_id(session)
    except ObsmemError:
        return False
    return True
