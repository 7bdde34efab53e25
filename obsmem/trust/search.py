"""Notes in search results: trusted notes always, candidates only when the caller asks for ``trust: all``.

Memory search (observations and reflections) runs first and is not changed; the notes the same query finds
are then merged in as hits of kind ``note``: by date in exact mode (newest first, like every exact hit) and
in hybrid mode by reciprocal rank, a note's score weighed by the share of the query's content words it
contains (each list keeps its own order). Exact mode matches notes with the same literal-substring rule as
memories; hybrid mode matches them by keywords (content and situation), and only a note holding at least
half of the query's content words (:data:`~obsmem.trust.notes.MIN_NOTE_COVERAGE`). A hybrid search that
found nothing close enough (``nothing_close``) gets no notes either. A session-scoped search returns no
notes: notes belong to no session.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from obsmem.dates import display_minute
from obsmem.errors import ValidationFailed
from obsmem.retrieval import Hit, SearchRequest, SearchResult
from obsmem.storage import ProjectDatabase
from obsmem.trust.notes import Note, has_candidates, search_exact, search_keywords

TRUST_LEVELS: tuple[str, ...] = ("trusted", "all")
RRF_K = 60


def parse_trust(value: object) -> str:
    if value is None:
        return "trusted"
    if value not in TRUST_LEVELS:
        raise ValidationFailed("trust must be 'trusted' or 'all'", field="trust")
    return str(value)


@dataclass(frozen=True)
class NoteHit(Hit):
    """A note as a search hit: ``trusted`` says whether it may be relied on (candidates come only with
    ``trust: all``)."""

    tier: str = "project"
    situation: str = ""
    status: str = "trusted"
    coverage: float = 1.0  # hybrid mode: the share of the query's content words it contains (not shown)

    @classmethod
    def from_note(cls, note: Note, coverage: float = 1.0) -> NoteHit:
        return cls(
            memory_id=note.note_id,
            kind="note",
            session_id="",
            date=display_minute(note.date),
            importance=None,
            content=note.content,
            tier=note.tier,
            situation=note.situation,
            status=note.status,
            coverage=coverage,
        )

    @property
    def trusted(self) -> bool:
        return self.status == "trusted"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "memory_id": self.memory_id,
            "kind": "note",
            "tier": self.tier,
            "date": self.date,
            "trusted": self.trusted,
            "status": self.status,
            "situation": self.situation,
            "content": self.content,
        }


def find_note_hits(
    tiers: list[tuple[str, ProjectDatabase]], request: SearchRequest, trust: str
) -> tuple[list[NoteHit], bool]:
    """The notes ``request`` finds in the tiers' databases, best first (newest first in exact mode), and
    whether any tier holds a candidate at all (without one there is nothing to judge, and the judging
    thread is not woken)."""
    statuses = ("trusted",) if trust == "trusted" else ("trusted", "candidate")
    found: list[NoteHit] = []
    any_candidate = False
    for _, db in tiers:
        with db.read() as conn:
            any_candidate = any_candidate or has_candidates(conn)
            if request.session_id is not None:
                continue
            if request.mode == "exact":
                notes = search_exact(conn, request.query, statuses, request.window, request.limit + 1)
                found += [NoteHit.from_note(note) for note in notes]
            else:
                matches = search_keywords(conn, request.query, statuses, request.window, request.limit + 1)
                found += [NoteHit.from_note(match.note, match.coverage) for match in matches]
    if request.mode == "exact":
        found.sort(key=lambda hit: hit.date, reverse=True)
    else:
        found.sort(key=lambda hit: -hit.coverage)  # the tiers' lists as one, best covered first
    return found, any_candidate


def merge_hits(result: SearchResult, notes: list[NoteHit], request: SearchRequest) -> SearchResult:
    """``result`` with the notes merged in and the limit applied; ``result`` itself when no note matched."""
    if not notes:
        return result
    combined: list[Hit]
    if request.mode == "exact":
        combined = sorted([*result.hits, *notes], key=lambda hit: hit.date, reverse=True)
    else:
        # A note's reciprocal-rank score is weighed by the share of the query's content words it contains:
        # a note with every one stands beside the memory of its rank, one with half of them falls ~60 places
        # (after the memories a search returns), so weak keyword matches never displace memories.
        scored = [(1.0 / (RRF_K + rank), 0, rank, hit) for rank, hit in enumerate(result.hits, 1)]
        scored += [(note.coverage / (RRF_K + rank), 1, rank, note) for rank, note in enumerate(notes, 1)]
        scored.sort(key=lambda item: (-item[0], item[1], item[2]))
        combined = [hit for *_, hit in scored]
    truncated = result.truncated or len(combined) > request.limit
    return dataclasses.replace(result, hits=combined[: request.limit], truncated=truncated)
