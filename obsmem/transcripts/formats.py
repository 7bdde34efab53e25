"""The two kinds of transcript reader.

- :class:`LineFormat`: an append-only file of records, one per line (Claude Code, Codex, Aider, OpenAI
  chat, obsmem events). The importer feeds it the lines after the file's watermark; the reader keeps a
  small JSON state (the current session, recent tool names) that is saved with the watermark, so an import
  of the new lines continues exactly where the last one stopped.
- :class:`DocumentFormat`: a file (or database) that is rewritten rather than appended to (Gemini CLI's
  chat files, opencode's database and JSON tree). The reader reads it whole into :class:`SessionDoc`\\ s
  whose events carry stable keys; the importer stores the events after the last key it stored before.
"""

from __future__ import annotations

import codecs
import json
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import orjson

from obsmem.transcripts.files import FileStamp, complete_lines, stamp
from obsmem.transcripts.records import ReaderOptions, SessionDoc, Skip, Turn


def decode_json_line(raw: bytes, line: int) -> dict[str, Any] | Skip:
    """A JSONL line as an object, or the problem with it (never raises). The file's first line may start
    with a byte-order mark (Windows tools write one), which is no part of its JSON."""
    if line == 1:
        raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        record = orjson.loads(raw)  # several times faster than json; on the hot path of every import
    except orjson.JSONDecodeError:
        pass  # the standard parser says what is wrong (and reads what orjson refuses, e.g. huge integers)
    else:
        if isinstance(record, dict):
            return record
        return Skip("not_an_object", line, problem=True, detail="the line is not a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Skip("invalid_utf8", line, problem=True, detail="not UTF-8 text")
    if not text.strip():
        return Skip("blank", line)
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, or an integer past 4,300 digits
        if isinstance(exc, json.JSONDecodeError):
            detail = exc.msg
        else:
            detail = "nested too deeply" if isinstance(exc, RecursionError) else "a number too long to read"
        return Skip("malformed_json", line, problem=True, detail=f"not valid JSON ({detail})")
    if not isinstance(record, dict):
        return Skip("not_an_object", line, problem=True, detail="the line is not a JSON object")
    return record


def is_whole_object(raw: bytes) -> bool:
    """Whether a line is one whole JSON object (a last line that is not may still be being written)."""
    try:
        return isinstance(orjson.loads(raw.removeprefix(codecs.BOM_UTF8)), dict)
    except orjson.JSONDecodeError:
        return False


class LineFormat(ABC):
    """Reads an append-only transcript line by line, with a resumable state."""

    source: ClassVar[str]
    # A final line without its newline: False leaves it for the next import (JSONL being written).
    take_unterminated: ClassVar[bool] = False
    # ... but True takes it when it is a whole JSON object: files written whole, not by an agent as it works,
    # often end without a newline, and their last record was never imported (and nothing said so).
    take_whole_last_object: ClassVar[bool] = False

    def __init__(self, options: ReaderOptions, path: Path, state: dict[str, Any], offset: int = 0) -> None:
        self.options = options
        self.path = path
        self.start_offset = offset  # where in the file the lines it is fed start (the watermark's bytes)
        self.restore(state)

    def restore(self, state: dict[str, Any]) -> None:  # noqa: B027 - readers without state keep nothing
        """Take back the state saved with the watermark (``{}`` at the start of a file)."""

    def state(self) -> dict[str, Any]:
        return {}

    def project_cwd(self) -> str | None:
        """The working directory the transcript records, read from its first records (for the project)."""
        return None

    @abstractmethod
    def read(self, raw: bytes, line: int) -> Iterable[Turn | Skip]:
        """The events (and skips) of one line."""

    def finish(self) -> Iterable[Turn | Skip]:
        """Events held back until the end of the file (a message whose end is only known by what follows)."""
        return ()


class DocumentFormat(ABC):
    """Reads a whole file or database into sessions whose events carry stable keys."""

    source: ClassVar[str]

    def __init__(self, options: ReaderOptions, path: Path) -> None:
        self.options = options
        self.path = path
        # False once a read failed part-way (a database locked or damaged mid-read): the sessions read
        # are stored, but the file must not be stamped as imported, so the next import reads it again.
        self.read_whole = True

    def stamp(self) -> FileStamp:
        """What tells that the document changed since its import: its file's size and time by default."""
        return stamp(self.path)

    @abstractmethod
    def sessions(self) -> Iterator[SessionDoc | Skip]:
        """Every session of the document (and problems met on the way, with their line or row)."""


# The working directory each file recorded, by its path and the size and time it had then. An import
# learns a file's project (and with it the database holding its watermark) from its first records; with
# this, a file unchanged since the last look in this process (``--follow`` looks every few seconds) is
# passed over after a stat and a watermark lookup, without opening it. Bounded: oldest entries go first.
_CWDS: OrderedDict[tuple[str, tuple[str, ...]], tuple[FileStamp, str | None]] = OrderedDict()
_CWDS_LIMIT = 16_384


def first_cwd(path: Path, keys: tuple[str, ...], max_lines: int = 200) -> str | None:
    """The first ``cwd`` found in the first lines of a JSONL file (at ``record[k1][k2]...`` paths);
    remembered while the file keeps its size and time (see :data:`_CWDS`)."""
    now = stamp(path)
    key = (str(path), keys)
    known = _CWDS.get(key)
    if known is not None and known[0] == now:
        _CWDS.move_to_end(key)
        return known[1]
    found = _read_first_cwd(path, keys, max_lines)
    _CWDS[key] = (now, found)
    _CWDS.move_to_end(key)
    while len(_CWDS) > _CWDS_LIMIT:
        _CWDS.popitem(last=False)
    return found


def _read_first_cwd(path: Path, keys: tuple[str, ...], max_lines: int) -> str | None:
    for number, (raw, _) in enumerate(complete_lines(path, 0, take_last=True)):
        if number >= max_lines:
            return None
        record = decode_json_line(raw, number + 1)
        if isinstance(record, Skip):
            continue
        for key in keys:
            value: Any = record
            for part in key.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if isinstance(value, str) and value:
                return value
    return None
