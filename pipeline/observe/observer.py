"""One Observer cycle: show the model a chunk, collect observations through ``record_observations``.

Every item the model sends is checked on its own and answered with a receipt it can act on: recorded
(with its id), duplicate, or rejected with a reason that says what to fix (for a bad ref, which events
may be cited; for a timestamp that is not the time of the events an item cites, their times). Valid items
are kept even when others in the same call are rejected. The conversation goes on for at most
``max_tool_rounds`` model replies; it ends early when the model answers without a tool call, or when it
keeps sending calls identical to earlier ones (a repetition loop).

Nothing is stored here: accepted observations are returned to the caller, which commits them together
with the chunk's coverage rows in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from obsmem.dates import parse_timestamp
from obsmem.errors import ObsmemError
from obsmem.memories import IMPORTANCE_LEVELS, ObservationIn, SourceRef
from obsmem.pipeline.llm import ChatModel
from obsmem.pipeline.memory_items import MemoryItem
from obsmem.pipeline.observe.packer import EventChunk
from obsmem.pipeline.observe.prompts import OBSERVER_SYSTEM_PROMPT, record_observations_tool, seq_ranges, user_message
from obsmem.pipeline.receipts import MAX_ITEMS_PER_CALL, MAX_RECORDED_PER_RUN, OneLine, ReceiptCheck
from obsmem.pipeline.toolloop import run_tool_loop

CONTENT = OneLine("the fact", "separate observations, one fact each", "shorten it or split it into separate facts")

# An observation's timestamp is when what it records happened: the time of an event it cites (a date the
# fact mentions, such as a deadline, belongs in its content). The transcript shows times to the minute, so a
# model may round or take a neighbouring event's time; beyond this margin it is another time altogether
# (9999-12-31, a local clock mistaken for UTC), and search by date would file the fact where it never was.
TIMESTAMP_MARGIN = timedelta(minutes=15)
_MINUTE_FORMAT = "%Y-%m-%d %H:%M"


@dataclass
class ItemChecker(ReceiptCheck[ObservationIn]):
    """Validates items from ``record_observations`` calls and remembers the accepted ones."""

    key = "observations"
    example = '{"observations": [{"content", "timestamp", "importance", "source_refs"}, ...]}'
    max_items = MAX_ITEMS_PER_CALL
    max_recorded = MAX_RECORDED_PER_RUN

    session_id: str
    shown: Mapping[int, str]  # the citable events' seqs, each with its time ("YYYY-MM-DD HH:MM")
    exists: Callable[[str], bool]
    max_chars: int
    example_time: str
    accepted: dict[str, ObservationIn] = field(default_factory=dict)

    def file(self, outcome: ObservationIn) -> tuple[str, str | None]:
        memory_id = outcome.memory_id()
        if memory_id in self.accepted:
            return memory_id[:12], "already recorded in this request"
        if self.exists(memory_id):
            return memory_id[:12], "already in memory"
        self.accepted[memory_id] = outcome
        return memory_id[:12], None

    def check_item(self, item: Any) -> ObservationIn | str:
        if not isinstance(item, dict):
            return "each item must be an object with content, timestamp, importance and source_refs"
        content, problem = CONTENT.check(item.get("content"), self.max_chars)
        if content is None:
            return problem or "content is missing"
        timestamp = item.get("timestamp")
        try:
            timestamp = parse_timestamp(timestamp)
        except ObsmemError:
            return f"timestamp must be 'YYYY-MM-DD HH:MM' (a real date and time), e.g. '{self.example_time}'"
        importance = item.get("importance")
        if importance not in IMPORTANCE_LEVELS:
            return "importance must be one of: " + ", ".join(IMPORTANCE_LEVELS)
        refs = _as_seqs(item.get("source_refs"), self.session_id)
        if refs is None:
            return "source_refs must be a non-empty list of event numbers from this transcript, e.g. [12, 13]"
        unknown = [seq for seq in refs if seq not in self.shown]
        if unknown:
            return (
                f"source_refs cite {seq_ranges(unknown)}, not in this transcript; "
                f"cite only: {seq_ranges(sorted(self.shown))}"
            )
        problem = self._timestamp_problem(timestamp, refs)
        if problem is not None:
            return problem
        try:
            return ObservationIn(
                session_id=self.session_id,
                content=content,
                timestamp=timestamp,
                importance=importance,
                source_refs=list[SourceRef | int](refs),
            )
        except ValidationError as exc:
            return f"invalid item: {exc.errors()[0]['msg']}"

    def _timestamp_problem(self, timestamp: str, refs: list[int]) -> str | None:
        """Why ``timestamp`` is not the time of the events ``refs`` cites (give or take the margin), or None."""
        times = sorted(self.shown[seq] for seq in refs)
        earliest, latest = times[0], times[-1]
        try:
            low = datetime.strptime(earliest, _MINUTE_FORMAT) - TIMESTAMP_MARGIN
            high = datetime.strptime(latest, _MINUTE_FORMAT) + TIMESTAMP_MARGIN
        except (ValueError, OverflowError):  # an event time at the edge of the calendar: bound what can be
            return None
        if low <= datetime.strptime(timestamp, _MINUTE_FORMAT) <= high:
            return None
        cited = f"at {earliest}" if earliest == latest else f"from {earliest} to {latest}"
        return (
            f"timestamp {timestamp} is not when the events it cites happened ({cited}, UTC): write the time of "
            "the event the fact comes from, and put any other date the fact refers to in its content"
        )


def _as_seqs(value: Any, session_id: str) -> list[int] | None:
    """Event numbers as models write them: 12, "12", "#12" or {"seq": 12} (with this session's id or none)."""
    if not isinstance(value, list) or not value:
        return None
    seqs: list[int] = []
    for ref in value:
        if isinstance(ref, dict):
            # A ref naming another session (or anything besides a seq) is not an event of this transcript:
            # keeping its seq alone would cite an event of this session the model never meant.
            if set(ref) - {"seq", "session_id"} or ref.get("session_id", session_id) != session_id:
                return None
            ref = ref.get("seq")
        if isinstance(ref, str):
            ref = ref.strip().lstrip("#")
            # ASCII digits only ("²".isdigit() is true, and int() refuses it), and no more than a seq holds.
            if not (ref.isascii() and ref.isdigit()) or len(ref) > 16:
                return None
            ref = int(ref)
        if isinstance(ref, bool) or not isinstance(ref, int) or ref < 1:
            return None
        seqs.append(ref)
    return seqs


@dataclass
class CycleResult:
    observations: list[ObservationIn]
    rounds: int
    rejected: int
    duplicates: int
    stop_reason: str  # "done" | "rounds_exhausted" | "repetition"
    prompt_tokens: int = 0
    completion_tokens: int = 0


def run_cycle(
    client: ChatModel,
    *,
    session_id: str,
    chunk: EventChunk,
    memory: list[MemoryItem],
    exists: Callable[[str], bool],
    max_rounds: int,
    max_chars: int,
) -> CycleResult:
    """Talk to the model about one chunk until it is done (or the round budget is spent)."""
    example = chunk.pieces[0].view.header.split(" ", 1)[1][:16] if chunk.pieces else "2026-01-01 09:00"
    shown = {piece.view.seq: piece.view.when for piece in chunk.pieces if piece.view.citable}
    checker = ItemChecker(session_id, shown, exists, max_chars, example)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": OBSERVER_SYSTEM_PROMPT},
        {"role": "user", "content": user_message(session_id, memory, chunk)},
    ]
    loop = run_tool_loop(
        client, messages, record_observations_tool(max_chars), checker.check_call, max_rounds=max_rounds
    )
    return CycleResult(
        observations=list(checker.accepted.values()),
        rounds=loop.rounds,
        rejected=checker.rejected,
        duplicates=checker.duplicates,
        stop_reason=loop.stop_reason,
        prompt_tokens=loop.prompt_tokens,
        completion_tokens=loop.completion_tokens,
    )
