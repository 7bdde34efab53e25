"""Eval data into projects through the real ingestion path, then indexed by the product's indexer.

Every dataset goes in the way an agent's memory would: its dialogue as conversation events
(``Obsmem.append_events``), its memories as observations citing those events
(``Obsmem.add_observations``), then ``Obsmem.index`` (the same backfill as ``obsmem index``). Each
loader returns the map the metrics need: memory id -> the dataset's ids it cites (dialogue turns for
LoCoMo, sessions for LongMemEval).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from obsmem.app import IndexReport, Obsmem
from obsmem.eval.datasets.locomo import Conversation, ObservationSpec, fact_observations, turn_observations
from obsmem.eval.datasets.longmemeval import LongMemEvalData
from obsmem.eval.datasets.question_sets import QuestionSet
from obsmem.ids import event_id
from obsmem.memories import MAX_MEMORY_CHARS
from obsmem.validation import CONTROL_CHARACTERS, SESSION_ID

Citations = dict[str, tuple[str, ...]]
# Observations per write: one transaction each, small enough to keep a write short.
WRITE_BATCH = 500
# A session without a date (LongMemEval allows it) is stored at this minute.
UNDATED = "2000-01-01 00:00"
WAYS: dict[str, str] = {"a": "turns", "b": "observations", "c": "events", "d": "events+observations"}
# Ways whose search covers the conversation's events (they need the events indexed).
CONVERSATION_WAYS = ("c", "d")


class IngestError(RuntimeError):
    """The product refused eval data: a bug in the loader or a malformed dataset."""


def one_line(text: str) -> str:
    """Memory text is one line without control characters: collapse all whitespace to single spaces."""
    return " ".join(CONTROL_CHARACTERS.sub(" ", text).split())


def pieces(text: str, size: int = MAX_MEMORY_CHARS) -> list[str]:
    """Split one-line ``text`` at spaces into parts of at most ``size`` characters (a longer word is cut)."""
    parts: list[str] = []
    current = ""
    for word in text.split(" "):
        while len(word) > size:
            if current:
                parts.append(current)
                current = ""
            parts.append(word[:size])
            word = word[size:]
        joined = f"{current} {word}" if current else word
        if len(joined) > size:
            parts.append(current)
            current = word
        else:
            current = joined
    if current:
        parts.append(current)
    return [part for part in parts if part]


def write_observations(
    memory: Obsmem, project: str, items: Sequence[dict[str, Any]], cites: Sequence[tuple[str, ...]]
) -> Citations:
    """Write ``items`` in batches; returns memory id -> cited ids (identical observations share an id)."""
    found: Citations = {}
    for start in range(0, len(items), WRITE_BATCH):
        batch = items[start : start + WRITE_BATCH]
        receipt = memory.add_observations(project, list(batch))
        if receipt.rejected:
            first = receipt.rejected[0]
            raise IngestError(
                f"{len(receipt.rejected)} observation(s) rejected in project {project};"
                f" first: {first.code}: {first.message}"
            )
        for entry in receipt.added + receipt.duplicates:
            cited = cites[start + entry.index]
            found[entry.memory_id] = tuple(dict.fromkeys(found.get(entry.memory_id, ()) + cited))
    return found


# -- LoCoMo ----------------------------------------------------------------------------------------------


def locomo_project(conversation: Conversation, way: str) -> str:
    return f"locomo-{conversation.sample_id.lower()}-{way}"


def _event_time(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:00Z")


def load_locomo_conversation(memory: Obsmem, conversation: Conversation, way: str) -> tuple[str, Citations]:
    """One conversation into its own project, way ``a`` (turns), ``b`` (the dataset's observations), ``c``
    (the events alone, searched as the conversation) or ``d`` (the events and the dataset's observations).

    Each turn is an event of session ``session-N`` at seq = its position (``D<N>:<seq>``), the first
    speaker as ``user`` and the second as ``assistant``. Returns the project and memory (or event) id ->
    turns: an event cites its own turn.
    """
    project = locomo_project(conversation, way)
    first_speaker = conversation.speakers[0]
    for session in conversation.sessions:
        events = [
            {
                "seq": turn.seq,
                "role": "user" if turn.speaker == first_speaker else "assistant",
                "content": turn.document,
                "created_at": _event_time(turn.when),
            }
            for turn in session.turns
        ]
        if events:
            memory.append_events(project, session.turns[0].session_id, events)
    found: Citations = {}
    if way in CONVERSATION_WAYS:
        found = {event_id(turn.session_id, turn.seq): (turn.dia_id,) for turn in conversation.turns()}
    if way == "c":
        return project, found
    specs: list[ObservationSpec] = (turn_observations if way == "a" else fact_observations)(conversation)
    items, cites = [], []
    for spec in specs:
        for part in pieces(one_line(spec.content)):
            items.append(
                {
                    "session_id": spec.session_id,
                    "content": part,
                    "timestamp": spec.timestamp,
                    "source_refs": spec.source_refs(),
                }
            )
            cites.append(spec.cites)
    return project, found | write_observations(memory, project, items, cites)


# -- LongMemEval -----------------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._:@-]")


def safe_session_ids(names: Iterable[str]) -> dict[str, str]:
    """Dataset session id -> a valid, unique obsmem session id (unchanged when already valid)."""
    chosen: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        candidate = name if SESSION_ID.fullmatch(name) else ("s" + _UNSAFE.sub("-", name))[:120]
        base, counter = candidate, 1
        while candidate in used:
            counter += 1
            candidate = f"{base[:110]}-{counter}"
        used.add(candidate)
        chosen[name] = candidate
    return chosen


def load_longmemeval_haystack(
    memory: Obsmem, project: str, data: LongMemEvalData, session_ids: Sequence[str]
) -> Citations:
    """The given sessions into ``project``: each turn an event, and an observation citing it.

    An observation is ``"<role>: <text>"`` on one line (split in parts when longer than a memory may be),
    dated with its session. Returns memory id -> (dataset session id,).
    """
    names = safe_session_ids(session_ids)
    items, cites = [], []
    for session_id in session_ids:
        session = data.sessions[session_id]
        stored = names[session_id]
        when = session.when.strftime("%Y-%m-%d %H:%M") if session.when else UNDATED
        events = [
            {
                "seq": position,
                "role": turn.role if turn.role in ("user", "assistant", "system") else "user",
                "content": turn.content,
                "created_at": session.when.strftime("%Y-%m-%dT%H:%M:00Z") if session.when else None,
            }
            for position, turn in enumerate(session.turns, start=1)
        ]
        if not events:
            continue
        memory.append_events(project, stored, events)
        for position, turn in enumerate(session.turns, start=1):
            for part in pieces(one_line(turn.content), MAX_MEMORY_CHARS - len(turn.role) - 2):
                items.append(
                    {
                        "session_id": stored,
                        "content": f"{turn.role}: {part}",
                        "timestamp": when,
                        "source_refs": [position],
                    }
                )
                cites.append((session_id,))
    return write_observations(memory, project, items, cites)


# -- the sample project ----------------------------------------------------------------------------------


def load_sample_project(memory: Obsmem) -> dict[str, int]:
    """The bundled sample (events and observations) into project ``sample`` of ``memory``'s data dir."""
    from obsmem.sample import SAMPLE_PROJECT, load_sample

    return load_sample(memory.database(SAMPLE_PROJECT, create=True))


def load_question_set(memory: Obsmem, question_set: QuestionSet) -> dict[str, int]:
    """A shipped question set's events and observations into its project of ``memory``'s data dir."""
    return question_set.load(memory.database(question_set.project, create=True))


# -- indexing --------------------------------------------------------------------------------------------

IndexProgress = Callable[[str, int, int], None]


def index_project(memory: Obsmem, project: str, progress: IndexProgress | None = None) -> IndexReport | None:
    """Index everything pending in ``project`` with the product's indexer (``Obsmem.index``).

    ``progress(project, done, total)`` is told after each batch. None when semantic mode is off.
    """
    if memory.indexer is None:
        return None
    total = memory.indexer.project(project).pending_count()
    done = 0

    def advance(report: Any) -> None:
        nonlocal done, total
        done += report.memories
        total = max(total, done + report.remaining)
        if progress is not None:
            progress(project, done, total)

    return memory.index(project, progress=advance)
