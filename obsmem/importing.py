"""Import JSONL files: transcripts (obsmem events or OpenAI-style chat messages) and observations.

Transcripts hold one event or chat message per line; the format is detected per line:

- **obsmem event**: ``{"role", "type", "content", "tool_name"?, "tool_args"?, "seq"?, "created_at"?,
  "session_id"?}`` (``type`` present).
- **OpenAI chat message**: ``{"role", "content", "tool_calls"?, "tool_call_id"?, "name"?}``. An assistant
  message becomes a ``message`` event (when it has text) and one ``tool_call`` event per call, with the
  function name and its parsed arguments; a ``tool`` message becomes a ``tool_result`` event carrying the
  name of the call it answers.

Lines without a ``seq`` are numbered from 1 in file order within their session, so importing the same
file twice stores nothing new (the second run reports duplicates), and importing a different transcript
over an existing session is a ``seq_conflict`` rather than a silent mix. A transcript is stored whole or
not at all: it is read and checked first (a bad line, or a seq the file gives two different events, is
named by its line), then compared with the stored events and written in one transaction (a conflict is
named by the file's line, and nothing of the file is stored).
Text holding lone surrogates (JSON ``"\\ud83d"`` without its pair), and bytes that are not UTF-8 (a
surrogate written as bytes, a Latin-1 byte), are stored with U+FFFD in their place, and the receipt names
the line (``invalid_unicode``, or ``invalid_utf8`` for bytes), as the transcript importers do.

An observations file holds one observation per line, written as :func:`obsmem.memories.add_observations`
would be sent it. Each line succeeds or fails on its own, and the receipt's ``index`` is the line's
position in the file counted from 0 (line number minus one); blank lines are skipped.
"""

from __future__ import annotations

import codecs
import json
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, NamedTuple

import apsw
from pydantic import ValidationError

from obsmem.errors import ObsmemError, SeqConflict, ValidationFailed
from obsmem.events import AfterInsert, EventIn, PreparedEvent, append_prepared, fingerprints_by_seq, prepare_event
from obsmem.memories import ObservationIn, WriteReceipt, add_observations, parse_observation
from obsmem.storage import ProjectDatabase
from obsmem.validation import first_problem, without_lone_surrogates
from obsmem.validation import session_id as check_session_id

BATCH_SIZE = 500
PROGRESS_EVERY_LINES = 2000
# Lines named in a receipt's problem_lines (all are counted): enough to find them, bounded for a huge file.
MAX_LISTED_PROBLEMS = 50
REPAIRED_UNICODE = "text holding lone surrogates (halves of a character); stored with U+FFFD in their place"
REPLACED_BYTES = "bytes that are not UTF-8 text; stored with U+FFFD in their place"

ImportProgress = Callable[[str, int, int], None]
"""Called as ``(phase, done, total)``: ``"read"`` counts bytes of the file read so far; ``"store"`` counts the
events of a transcript stored so far (a transcript is read whole before anything is stored)."""


def _text(content: Any) -> str:
    """OpenAI content may be a string, null, or a list of parts; keep the text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    raise ValueError("content must be a string, null or a list of parts")


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # ValueError: JSONDecodeError, or an integer past 4,300 digits
            return raw  # keep what the model sent; the Observer still sees it
    return raw


def parse_json_line(line: str, where: str) -> Any:
    """One JSONL line as JSON; a line that is not JSON (or is nested too deeply to read) names its line."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValidationFailed(f"{where}: not valid JSON ({exc.msg})", field=where) from None
    except RecursionError:
        raise ValidationFailed(f"{where}: not valid JSON (nested too deeply)", field=where) from None
    except ValueError:  # an integer of more than 4,300 digits, which Python refuses to convert
        raise ValidationFailed(f"{where}: not valid JSON (a number too long to read)", field=where) from None


def openai_message_to_events(message: dict[str, Any], call_names: dict[str, str]) -> list[dict[str, Any]]:
    """One chat message -> obsmem events (without seq). ``call_names`` maps call ids to tool names."""
    role = message.get("role")
    stamp = message.get("created_at") or message.get("timestamp")
    extra = {"created_at": stamp} if stamp is not None else {}
    if role in ("user", "system", "developer"):
        return [
            {
                "role": "system" if role == "developer" else role,
                "type": "message",
                "content": _text(message.get("content")),
                **extra,
            }
        ]
    if role == "assistant":
        events: list[dict[str, Any]] = []
        text = _text(message.get("content"))
        if text:
            events.append({"role": "assistant", "type": "message", "content": text, **extra})
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list):
            raise ValueError("tool_calls must be a list of calls")
        for call in calls:
            if not isinstance(call, dict):
                raise ValueError("tool_calls items must be objects")
            function = call.get("function") or {}
            if not isinstance(function, dict):
                raise ValueError("tool_calls items' function must be an object with name and arguments")
            name = function.get("name")
            call_id = call.get("id")
            if isinstance(call_id, str) and isinstance(name, str):
                call_names[call_id] = name
            events.append(
                {
                    "role": "assistant",
                    "type": "tool_call",
                    "content": "",
                    "tool_name": name,
                    "tool_args": _arguments(function.get("arguments")),
                    "tool_call_id": call_id,
                    **extra,
                }
            )
        if not events:
            events.append({"role": "assistant", "type": "message", "content": "", **extra})
        return events
    if role in ("tool", "function"):
        call_id = message.get("tool_call_id")
        name = message.get("name") or (call_names.get(call_id) if isinstance(call_id, str) else None)
        return [
            {
                "role": "tool",
                "type": "tool_result",
                "content": _text(message.get("content")),
                "tool_name": name,
                "tool_call_id": call_id,
                **extra,
            }
        ]
    raise ValueError("role must be user, assistant, tool or system")


@dataclass(frozen=True)
class SessionTotals:
    """One session's share of an import: events appended, duplicates skipped, and its last seq after."""

    appended: int = 0
    duplicates: int = 0
    last_seq: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"appended": self.appended, "duplicates": self.duplicates, "last_seq": self.last_seq}


class LineProblem(NamedTuple):
    """A line stored with a defect, named by its number (``reason`` is a stable code), never by its text."""

    reason: str
    line: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "line": self.line, "detail": self.detail}


@dataclass
class ImportReceipt:
    """What an import of events stored, session by session (typed; ``to_dict`` is the wire shape).

    ``problems`` counts the lines stored with a defect by reason (``invalid_unicode``: text holding lone
    surrogates; ``invalid_utf8``: bytes that are not UTF-8; both stored with U+FFFD in their place);
    ``problem_lines`` names the first :data:`MAX_LISTED_PROBLEMS` of them, as an ``obsmem import`` report does."""

    events: int = 0
    sessions: dict[str, SessionTotals] = field(default_factory=dict)
    problems: Counter[str] = field(default_factory=Counter)
    problem_lines: list[LineProblem] = field(default_factory=list)

    def problem(self, reason: str, line: int, detail: str) -> None:
        self.problems[reason] += 1
        if len(self.problem_lines) < MAX_LISTED_PROBLEMS:
            self.problem_lines.append(LineProblem(reason, line, detail))

    @property
    def appended(self) -> int:
        return sum(s.appended for s in self.sessions.values())

    @property
    def duplicates(self) -> int:
        return sum(s.duplicates for s in self.sessions.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "appended": self.appended,
            "duplicates": self.duplicates,
            "sessions": {session: totals.to_dict() for session, totals in self.sessions.items()},
            "problems": dict(sorted(self.problems.items())),
            "problem_lines": [problem.to_dict() for problem in self.problem_lines],
        }


class TranscriptEvent(NamedTuple):
    """One event of a transcript file, ready to store: validated, redacted and numbered (``event.seq`` is
    always set), with the line it came from, which every error about it names. ``repaired``: what was
    stored with U+FFFD in its place (lone surrogates, bytes that are not UTF-8), empty when nothing was."""

    session: str
    line: int
    event: PreparedEvent
    repaired: str = ""


def read_jsonl(
    lines: Iterable[str], default_session: str | None, replaced_bytes: Collection[int] = ()
) -> Iterator[TranscriptEvent]:
    """Validate and prepare every line's events. Errors name the line number.

    Text holding lone surrogates (Node.js writes JSON ``"\\ud83d"`` when it cuts a string inside an emoji)
    is kept with U+FFFD in their place, and the event says it was repaired, as the transcript importers do:
    refusing it would refuse the whole file for half a character. ``replaced_bytes``: the numbers of the
    lines whose bytes that are not UTF-8 were decoded as U+FFFD (their events say so too)."""
    call_names: dict[str, str] = {}
    next_seq: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        record = parse_json_line(line, where)
        if not isinstance(record, dict):
            raise ValidationFailed(f"{where}: each line must be a JSON object", field=where)
        session = record.pop("session_id", None) or default_session
        if session is None:
            raise ValidationFailed(
                f"{where}: no session_id on the line and no session for the file (obsmem ingest --session SESSION)",
                field=where,
            )
        check_session_id(session, field=f"{where}.session_id")
        try:
            raws = [record] if "type" in record else openai_message_to_events(record, call_names)
        except ValueError as exc:
            raise ValidationFailed(f"{where}: {exc}", field=where) from None
        for raw in raws:
            try:
                fields = without_lone_surrogates(raw)
            except RecursionError:  # nested past what obsmem takes: validation refuses it below, saying so
                fields = raw
            event = _parse_event(fields, where)
            if event.seq is None:
                event = event.model_copy(update={"seq": next_seq.get(session, 0) + 1})
            next_seq[session] = max(next_seq.get(session, 0), event.seq or 0)
            repaired = [REPLACED_BYTES] if number in replaced_bytes else []
            repaired += [REPAIRED_UNICODE] if fields is not raw else []
            yield TranscriptEvent(session, number, prepare_event(event), "; ".join(repaired))


def _parse_event(raw: dict[str, Any], where: str) -> EventIn:
    """One event of a line; an error names the line and the field (``line 3.created_at``)."""
    try:
        return EventIn.model_validate(raw)
    except ValidationError as exc:
        raise first_problem(exc, where) from None


def _decoded_lines(
    handle: IO[bytes], total_bytes: int, progress: ImportProgress | None, replaced: set[int]
) -> Iterator[str]:
    """The file's lines as text, reporting bytes read. Bytes that are not UTF-8 (a surrogate written as
    bytes, a Latin-1 byte) are decoded as U+FFFD and the line's number is added to ``replaced``: refusing
    them refused the whole file for one byte."""
    done = 0
    for number, raw in enumerate(handle, start=1):
        done += len(raw)
        if number == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)  # a byte-order mark, as Windows tools write one, is no text
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", "replace")
            replaced.add(number)
        if progress is not None and number % PROGRESS_EVERY_LINES == 0:
            progress("read", done, total_bytes)
        yield line
    if progress is not None:
        progress("read", done, total_bytes)


def read_transcript(
    path: Path, default_session: str | None = None, progress: ImportProgress | None = None
) -> list[TranscriptEvent]:
    """Read and validate a whole JSONL transcript; raises on the first bad line, naming it.

    A seq the file uses twice for different events is a bad line too (the file contradicts itself); the
    same event twice at one seq is stored once and counted as a duplicate, as a repeated append is."""
    with open(path, "rb") as handle:
        total_bytes = path.stat().st_size
        replaced: set[int] = set()  # filled as the lines are read, before each line's events are made
        parsed = list(read_jsonl(_decoded_lines(handle, total_bytes, progress, replaced), default_session, replaced))
    _refuse_repeated_seqs(parsed)
    return parsed


def _refuse_repeated_seqs(parsed: list[TranscriptEvent]) -> None:
    first_at: dict[tuple[str, int | None], TranscriptEvent] = {}
    for item in parsed:
        earlier = first_at.setdefault((item.session, item.event.seq), item)
        if earlier.event.fingerprint != item.event.fingerprint:
            where = f"line {item.line}"
            raise ValidationFailed(
                f"{where}: seq {item.event.seq} of session '{item.session}' is used by line {earlier.line} for a "
                "different event",
                field=f"{where}.seq",
            )


def append_transcript(
    db: ProjectDatabase,
    parsed: list[TranscriptEvent],
    progress: ImportProgress | None = None,
    *,
    after_insert: AfterInsert | None = None,
) -> ImportReceipt:
    """Store a read transcript whole or not at all (``after_insert`` as in append_events).

    One write transaction holds the check and every batch: the file is compared with the stored events
    first, so a seq conflict is reported by the file's line before anything is written, and a storage
    fault midway leaves nothing of the file behind. Batches only bound each statement's size."""
    receipt = ImportReceipt(events=len(parsed))
    by_session: dict[str, list[PreparedEvent]] = {}
    repaired_lines: set[int] = set()
    for item in parsed:
        by_session.setdefault(item.session, []).append(item.event)
        if item.repaired and item.line not in repaired_lines:
            repaired_lines.add(item.line)
            # Named as the transcript importers name the same defects: bad bytes first, as they hide the rest.
            reason = "invalid_utf8" if REPLACED_BYTES in item.repaired else "invalid_unicode"
            receipt.problem(reason, item.line, item.repaired)
    stored = 0
    with db.write() as conn:
        _refuse_conflicts(conn, parsed, by_session)
        for session, events in by_session.items():
            totals = SessionTotals()
            for start in range(0, len(events), BATCH_SIZE):
                batch = events[start : start + BATCH_SIZE]
                # Joins the transaction opened above (a nested write does, on both backends).
                result = append_prepared(db, session, batch, after_insert=after_insert)
                totals = SessionTotals(
                    appended=totals.appended + result.appended,
                    duplicates=totals.duplicates + result.duplicates,
                    last_seq=result.last_seq,
                )
                stored += len(batch)
                if progress is not None:
                    progress("store", stored, receipt.events)
            receipt.sessions[session] = totals
    return receipt


def _refuse_conflicts(
    conn: apsw.Connection, parsed: list[TranscriptEvent], by_session: dict[str, list[PreparedEvent]]
) -> None:
    """A :class:`SeqConflict` naming the first line of the file whose seq holds a different stored event."""
    stored: dict[str, dict[int, str]] = {}
    for session, events in by_session.items():
        seqs = [event.seq for event in events if event.seq is not None]
        stored[session] = fingerprints_by_seq(conn, session, min(seqs), max(seqs))
    for item in parsed:
        known = stored[item.session].get(item.event.seq or 0)
        if known is not None and known != item.event.fingerprint:
            where = f"line {item.line}"
            raise SeqConflict(
                f"{where}: seq {item.event.seq} of session '{item.session}' already holds a different event",
                field=f"{where}.seq",
                details={"seq": item.event.seq, "line": item.line},
            )


def import_jsonl(
    db: ProjectDatabase,
    path: Path,
    default_session: str | None = None,
    progress: ImportProgress | None = None,
    *,
    after_insert: AfterInsert | None = None,
) -> ImportReceipt:
    """Validate the whole file first (nothing is stored from a bad file), then store it whole."""
    parsed = read_transcript(path, default_session, progress)
    return append_transcript(db, parsed, progress, after_insert=after_insert)


def import_observations(db: ProjectDatabase | None, path: Path, progress: ImportProgress | None = None) -> WriteReceipt:
    """Write every observation of a JSONL file; one receipt, indexed by line (see the module docstring).

    ``db`` None: the project does not exist yet, so every line is checked and rejected (see add_observations).
    """
    receipt = WriteReceipt()
    pending: list[tuple[int, ObservationIn]] = []

    def flush() -> None:
        written = add_observations(db, [item for _, item in pending])
        # Indexes in ``written`` are positions in this batch; the receipt's are line numbers of the file.
        receipt.added.extend(replace(entry, index=pending[entry.index][0]) for entry in written.added)
        receipt.duplicates.extend(replace(entry, index=pending[entry.index][0]) for entry in written.duplicates)
        receipt.rejected.extend(replace(entry, index=pending[entry.index][0]) for entry in written.rejected)
        pending.clear()

    total_bytes = path.stat().st_size
    done = 0
    with open(path, "rb") as handle:
        # Lines are decoded one by one (not through _decoded_lines): a line that is not UTF-8 is rejected
        # like any other bad line, and the lines around it are still written.
        for index, raw_line in enumerate(handle):
            done += len(raw_line)
            if progress is not None and (index + 1) % PROGRESS_EVERY_LINES == 0:
                progress("read", done, total_bytes)
            where = f"line {index + 1}"
            try:
                line = raw_line.decode("utf-8")
                if not line.strip():
                    continue
                pending.append((index, parse_observation(index, parse_json_line(line, where))))
            except UnicodeDecodeError:
                receipt.reject(index, ValidationFailed(f"{where}: not UTF-8 text", field=where))
            except ObsmemError as exc:
                receipt.reject(index, exc)
            if len(pending) >= BATCH_SIZE:
                flush()
    if progress is not None:
        progress("read", done, total_bytes)
    if pending:
        flush()
    receipt.added.sort(key=lambda entry: entry.index)
    receipt.duplicates.sort(key=lambda entry: entry.index)
    receipt.rejected.sort(key=lambda entry: entry.index)
    return receipt
