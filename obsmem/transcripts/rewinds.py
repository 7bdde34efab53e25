"""Merging a document session whose stored part changed, in order: a rewind is not a reordering.

Gemini CLI can rewind a conversation (``$rewindTo``): the messages after the one named are dropped and
the conversation goes on from there, often with the same words ("yes", a prompt sent again). Matching
the new conversation against the stored events as a multiset would take such a re-sent message for the
dropped one and never store it. A rewound session is therefore compared in order: its first events that
are the stored events, one by one, are duplicates; from the first that differs on, the events are new,
except those already stored after the session's watermark (an import that stored them and stopped
before saving its watermark), which are matched as a multiset so nothing is stored twice.
"""

from __future__ import annotations

from collections import Counter

from obsmem.events import event_fingerprints
from obsmem.storage import ProjectDatabase


def in_order_merge(
    db: ProjectDatabase, session: str, fingerprints: list[str | None], watermark_events: int
) -> tuple[int, Counter[str]]:
    """How many of the document's first events (``fingerprints``, None for one that is not valid) are the
    stored events in order, and the counts the rest is merged against: the events stored after the first
    ``watermark_events`` (what the last saved watermark says the session held)."""
    with db.read() as conn:
        stored = event_fingerprints(conn, session)
    same = 0
    for mine, theirs in zip(fingerprints, stored, strict=False):
        if mine is None or mine != theirs:
            break
        same += 1
    return same, Counter(stored[max(watermark_events, same) :])
