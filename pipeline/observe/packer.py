"""The deterministic chunk packer: which events (and which existing memory) go into one Observer request.

The envelope is ``context_window_ratio`` of the model's context window (the rest is left for the model's
answers across the tool rounds). From it come the fixed prompt, up to ``memory_share`` of it for existing
memory, and the remainder for new events.

- **Events** are taken in ``seq`` order and never split across requests, with one exception: a single
  event too large for a request on its own is cut into parts (at a line break or space when one is near),
  each sent alone and covered by its own coverage row ``(seq, part_start)``. A later part resumes at the
  offset where the covered parts end, so a crash between parts repeats nothing.
- **Existing memory** gives the Observer context, so it does not re-record what is known and can record
  changes as superseding earlier facts. Half of its budget goes to the newest items, the rest to the most
  important of the remaining ones (reflections first, then critical, high, ...), newest first within a
  rank; the chosen items are shown in time order.

Same inputs, same chunk: the packer reads nothing but its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from obsmem.pipeline.memory_items import MemoryItem
from obsmem.pipeline.observe.hygiene import EventView
from obsmem.pipeline.tokens import MESSAGE_OVERHEAD, chars_for_tokens, estimate_tokens

MIN_EVENT_BUDGET = 256


@dataclass(frozen=True)
class Budget:
    envelope: int
    memory: int
    events: int

    @classmethod
    def plan(cls, context_window: int, ratio: float, memory_share: float, prompt_tokens: int) -> Budget:
        envelope = int(context_window * ratio)
        memory = int(envelope * memory_share)
        events = envelope - prompt_tokens - memory
        if events < MIN_EVENT_BUDGET:
            raise ValueError(
                f"the observer's event budget is {events} tokens: raise model.context_window_tokens or "
                "observer.context_window_ratio, or lower observer.memory_share"
            )
        return cls(envelope, memory, events)


@dataclass(frozen=True)
class Piece:
    """All of an event, or one part of an oversized one (``body[start:end]``)."""

    view: EventView
    start: int
    end: int
    final: bool

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.final

    def text(self) -> str:
        if self.whole:
            return f"{self.view.header}:\n{self.view.body}"
        total = len(self.view.body)
        label = f"part: characters {self.start}-{self.end} of {total}"
        if not self.final:
            label += "; continues in a later request"
        return f"{self.view.header} ({label}):\n{self.view.body[self.start : self.end]}"

    @property
    def tokens(self) -> int:
        return MESSAGE_OVERHEAD + estimate_tokens(self.text())


@dataclass(frozen=True)
class EventChunk:
    """The events (or the part of one) shown in one Observer request: "chunk" in the pipeline.

    Named apart from the indexer's ``Chunk`` (a piece of one memory's text, for embedding).
    """

    pieces: tuple[Piece, ...]

    @property
    def seqs(self) -> list[int]:
        return [piece.view.seq for piece in self.pieces]

    @property
    def citable_seqs(self) -> list[int]:
        return [piece.view.seq for piece in self.pieces if piece.view.citable]

    @property
    def tokens(self) -> int:
        return sum(piece.tokens for piece in self.pieces)

    @property
    def source_tokens(self) -> int:
        """Backlog tokens this chunk clears: whole events, and an oversized event with its last part."""
        return sum(piece.view.source_tokens for piece in self.pieces if piece.final)

    def transcript(self) -> str:
        return "\n\n".join(piece.text() for piece in self.pieces)


def _cut(body: str, start: int, budget: int) -> int:
    """Where a part starting at ``start`` ends: within budget, at a line break or space when close."""
    end = chars_for_tokens(body, start, budget)
    if end >= len(body):
        return len(body)
    floor = start + (end - start) // 2
    for separator in ("\n", " "):
        at = body.rfind(separator, floor, end)
        if at > start:
            return at + 1
    return end


def pack_chunk(pending: Sequence[tuple[EventView, int]], budget: int) -> EventChunk | None:
    """The next chunk from events in ``seq`` order, each with the offset its uncovered text starts at."""
    pieces: list[Piece] = []
    used = 0
    for view, offset in pending:
        whole = Piece(view, offset, len(view.body), True)
        cost = whole.tokens
        if offset == 0 and used + cost <= budget:
            pieces.append(whole)
            used += cost
            continue
        if pieces:
            break  # the next event does not fit: it starts the next chunk
        if cost <= budget:
            # The final part of an event cut earlier; whole events may follow it.
            pieces.append(whole)
            used += cost
            continue
        # An event too large for a request on its own: send the next part alone.
        header_cost = Piece(view, offset, offset + 1, False).tokens
        end = _cut(view.body, offset, max(1, budget - header_cost))
        pieces.append(Piece(view, offset, end, end >= len(view.body)))
        break
    return EventChunk(tuple(pieces)) if pieces else None


def select_memory(items: Sequence[MemoryItem], budget: int) -> list[MemoryItem]:
    """Existing memory to show: newest first for half the budget, then most important; in time order."""
    newest_first = sorted(items, key=lambda m: (m.timestamp, m.memory_id), reverse=True)
    chosen: dict[str, MemoryItem] = {}
    used = 0
    for item in newest_first:
        if used + item.tokens > budget // 2:
            break
        chosen[item.memory_id] = item
        used += item.tokens
    # Stable sort of a newest-first list: by rank, newest first within a rank.
    by_rank = sorted((m for m in newest_first if m.memory_id not in chosen), key=lambda m: -m.rank)
    for item in by_rank:
        if used + item.tokens > budget:
            continue
        chosen[item.memory_id] = item
        used += item.tokens
    return sorted(chosen.values(), key=lambda m: (m.kind != "reflection", m.timestamp, m.memory_id))
