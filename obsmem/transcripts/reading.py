"""Reading a line file into chunks of prepared events: the CPU-bound half of an import.

An import reads a line file (a JSONL transcript) from its watermark, turns each line into events and
skips, validates each event and redacts it (:func:`obsmem.events.prepare_event`), and hands the importer
one :class:`Chunk` per :data:`~obsmem.transcripts.importer.CHUNK_EVENTS` events, each with the cursor
its watermark records (offset, line, reader state, checksums of the consumed bytes). None of this
touches the database, so it runs either in the importing process or in a reading process beside it
(:mod:`obsmem.transcripts.reading_process`) while the importer writes the chunk before; both run the
same :func:`read_chunks`, so what they hand over is the same.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from obsmem.events import EventIn, PreparedEvent, prepare_event, prepare_plain
from obsmem.transcripts.aider import AiderFormat
from obsmem.transcripts.chat import ObsmemEventsFormat, OpenAIChatFormat
from obsmem.transcripts.claude_code import ClaudeCodeFormat
from obsmem.transcripts.codex import CodexFormat
from obsmem.transcripts.files import DAMAGED_COMPRESSION, WINDOW, complete_lines
from obsmem.transcripts.formats import LineFormat, is_whole_object
from obsmem.transcripts.records import ReaderOptions, Skip, Turn
from obsmem.validation import first_problem, without_lone_surrogates

LINE_FORMATS: dict[str, type[LineFormat]] = {
    "claude-code": ClaudeCodeFormat,
    "codex": CodexFormat,
    "aider": AiderFormat,
    "openai-chat": OpenAIChatFormat,
    "obsmem": ObsmemEventsFormat,
}


class ReadTurn(NamedTuple):
    """A turn read and prepared: its event (None if refused) and the problem met, if any.

    An event with a timestamp obsmem cannot read keeps the event and names the problem
    (``invalid_timestamp``), and so does one whose text held lone surrogates, stored with U+FFFD in
    their place (``invalid_unicode``); an event obsmem refuses has no event (``invalid_event``).
    """

    session_id: str
    line: int
    record_id: str | None
    event: PreparedEvent | None
    problem: str | None = None
    detail: str = ""


_REPAIRED_UNICODE = "text holding lone surrogates (halves of a character); stored with U+FFFD in their place"
_IMPORT_TIME = "a timestamp obsmem cannot read; stored with the time of the import"


def prepare_turn(turn: Turn) -> ReadTurn:
    """The turn validated and redacted. Rather than losing the event, text holding lone surrogates (an
    agent that cut a string inside an emoji) is stored with U+FFFD in their place, and a timestamp obsmem
    cannot read is dropped, the event stored with the time it is imported; both are reported."""
    plain = prepare_plain(turn.event)
    if plain is not None:
        return ReadTurn(turn.session_id, turn.line, turn.record_id, plain)
    try:
        fields = without_lone_surrogates(turn.event)
    except RecursionError:  # nested past what obsmem takes: validation refuses it below, saying so
        fields = turn.event
    repaired = fields is not turn.event  # the same event always repairs the same way: a re-import finds it
    code, detail = ("invalid_unicode", _REPAIRED_UNICODE) if repaired else (None, "")
    try:
        event = EventIn.model_validate(fields)
    except ValidationError as exc:
        problem = first_problem(exc, f"line {turn.line}")
    else:
        return ReadTurn(turn.session_id, turn.line, turn.record_id, prepare_event(event), code, detail)
    if problem.field is not None and problem.field.endswith("created_at"):
        try:
            event = EventIn.model_validate({k: v for k, v in fields.items() if k != "created_at"})
        except ValidationError:
            pass
        else:
            detail = f"{_IMPORT_TIME}; {_REPAIRED_UNICODE}" if repaired else _IMPORT_TIME
            return ReadTurn(
                turn.session_id, turn.line, turn.record_id, prepare_event(event), "invalid_timestamp", detail
            )
    return ReadTurn(turn.session_id, turn.line, turn.record_id, None, "invalid_event", problem.message)


class Window:
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


@dataclass(frozen=True)
class LineJob:
    """Where to read a line file from: the cursor its watermark saved (or the start of the file)."""

    source: str
    path: str
    options: ReaderOptions
    reader_state: dict[str, Any]
    offset: int
    line: int
    head: bytes
    tail: bytes
    chunk_events: int


@dataclass
class Chunk:
    """Up to ``chunk_events`` prepared turns and the skips met reading them, with the cursor after them.

    ``final`` marks the file's last chunk (the reader's held-back events included). ``damaged``: the
    compressed data ends in damage after ``line`` (reported in ``problems``). ``error``: reading failed
    here; the importer counts what was read and raises it, as an in-process read would have.
    """

    turns: list[ReadTurn]
    skipped: Counter[str]
    problems: list[Skip]
    offset: int
    line: int
    reader_state: dict[str, Any]
    checksums: tuple[str, str]
    final: bool = False
    damaged: bool = False
    error: BaseException | None = field(default=None)

    def __reduce__(self) -> tuple[Any, ...]:
        # Named tuples pickle several times slower than plain ones (each names its class and is rebuilt
        # through it), and a chunk holds thousands: they travel as plain tuples and are rebuilt on arrival.
        turns = [
            (turn[0], turn[1], turn[2], None if turn[3] is None else tuple(turn[3]), turn[4], turn[5])
            for turn in self.turns
        ]
        fields = (self.skipped, self.problems, self.offset, self.line, self.reader_state, self.checksums)
        return (_rebuild_chunk, (turns, *fields, self.final, self.damaged, self.error))


def _rebuild_chunk(turns: list[tuple[Any, ...]], *fields: Any) -> Chunk:
    make_turn, make_event = ReadTurn._make, PreparedEvent._make
    rebuilt = [
        make_turn((turn[0], turn[1], turn[2], None if turn[3] is None else make_event(turn[3]), turn[4], turn[5]))
        for turn in turns
    ]
    return Chunk(rebuilt, *fields)


def read_chunks(job: LineJob) -> Iterator[Chunk]:
    """The file's chunks from the job's cursor on (see the module docstring); never raises for what the
    file holds or for an I/O error, which ends the chunks with ``error``."""
    fmt = LINE_FORMATS[job.source]
    path = Path(job.path)
    reader = fmt(job.options, path, job.reader_state, job.offset)
    window = Window(job.head, job.tail)
    offset, line = job.offset, job.line
    turns: list[ReadTurn] = []
    skipped: Counter[str] = Counter()
    problems: list[Skip] = []

    def take(items: Any) -> None:
        for item in items:
            if not isinstance(item, Skip):
                turns.append(prepare_turn(item))
            elif item.problem:
                problems.append(item)
            else:
                skipped[item.reason] += 1

    damaged = False
    try:
        take_last = fmt.take_unterminated or fmt.take_whole_last_object
        for raw, end in complete_lines(path, offset, take_last=take_last):
            if not (raw.endswith(b"\n") or fmt.take_unterminated or is_whole_object(raw)):
                break  # still being written: it waits for the next import
            line += 1
            window.add(raw)
            take(reader.read(raw, line))
            offset = end
            if len(turns) >= job.chunk_events:
                yield Chunk(turns, skipped, problems, offset, line, reader.state(), window.checksums())
                turns, skipped, problems = [], Counter(), []
    except DAMAGED_COMPRESSION:
        # Everything before the damage is stored; the next import stops at the same place.
        damaged = True
        problems.append(
            Skip("read_error", line + 1, problem=True, detail="the compressed data is damaged from here on")
        )
    except OSError as exc:
        yield Chunk(turns, skipped, problems, offset, line, {}, ("", ""), final=True, error=exc)
        return
    take(reader.finish())
    yield Chunk(turns, skipped, problems, offset, line, reader.state(), window.checksums(), final=True, damaged=damaged)
