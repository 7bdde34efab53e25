"""Supersession at search time: for a question about the present, the latest memory about a thing ranks
above the earlier memories it replaced.

Memories are observations over months, and a decision is often revised ("the cache moves to redb",
then "the cache moves back to files"). A question such as "which storage format does the cache use
now?" matches every revision about as well, and the earliest, often the most detailed, tends to win.
The pipeline records no link between a revision and what it revised (the Observer writes the change as
a new observation, often saying it supersedes the earlier one), so the link is inferred here, among
the fused candidates only: a later candidate whose embedding is close to an earlier, higher-ranked
one's is taken to be about the same thing, and it takes that one's place (it moves just above it; the
earlier memory stays in the list, below it). Nothing is stored, so nothing needs rebuilding.

Two cues decide when it applies, both cheap:

- the question asks about the present (:func:`asks_about_now`: "now", "today", "current", "latest",
  "still", "at the moment", ...); a question about what happened then keeps the fused order;
- how close "about the same thing" must be: ``min_cosine`` between the two chunks' embeddings, lower
  (``stated_min_cosine``) when the later memory states that it changes something ("supersedes",
  "instead of", "no longer", ...: how the Observer is told to write a change).

A date bonus alone (newest first among the top candidates) was measured first and does not separate
"the same decision, later" from "a later memory about something else" (docs/eval.md).

Within one session the dates say nothing: the session that settles a thing also holds the request that
led to it, the steps on the way and details written right after it, all about the same thing and often
closer to the question's words. With ``settled_first`` the note that states where the thing was left (a
decision, a completion, or a change: how the Observer is told to write them) moves above its own
session's higher-ranked notes about the same thing (cosine at least ``stated_min_cosine``) that state
nothing of the kind (:func:`settled_first`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from obsmem.retrieval.fusion import Fused

# Words that put a question in the present. Whole words, case-insensitive.
PRESENT_CUES = re.compile(
    r"\b(now|nowadays|today|currently|current|latest|newest|still|anymore|presently|these days|"
    r"at the moment|at present|right now|as of now|most recent|most recently)\b",
    re.IGNORECASE,
)
# Wording by which a memory says it changes an earlier state (the Observer writes changes this way).
CHANGE_CUES = re.compile(
    r"\b(supersed\w*|replac\w*|instead of|no longer|switch\w*|mov(?:e|es|ed) (?:to|from)|migrat\w*|"
    r"changed? from|deprecat\w*|removed?|dropped|upgraded?|promoted|now)\b",
    re.IGNORECASE,
)


# A named month or year anchors a question in its own time: "the latest project in July 2023" asks about July.
# ("May" alone is left out: as a modal verb it is commoner in a question; "May 2023" is caught by its year.)
NAMED_DATE = re.compile(
    r"\b(january|february|march|april|june|july|august|september|october|november|december|"
    r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)


# Wording by which a memory states where a thing was left: a decision, a completion, a stated supersession.
SETTLED_CUES = re.compile(r"^\s*(?:decision|decided|completed|done)\b|\bsupersed\w*", re.IGNORECASE)


def asks_about_now(query: str) -> bool:
    """Whether ``query`` asks about the present state of something: a cue word (whole-word match), and no
    named month or year that would anchor it in another time."""
    return PRESENT_CUES.search(query) is not None and NAMED_DATE.search(query) is None


def states_change(text: str) -> bool:
    """Whether a memory's text says it changes an earlier state."""
    return CHANGE_CUES.search(text) is not None


def supersede(
    ranked: Fused,
    *,
    dates: Mapping[int, str],
    sessions: Mapping[int, str],
    embeddings: Mapping[int, np.ndarray],
    changes: Mapping[int, bool],
    depth: int,
    min_cosine: float,
    stated_min_cosine: float,
    max_score_gap: float | None = None,
) -> Fused:
    """``ranked`` with each of its first ``depth`` candidates placed just above the highest-ranked earlier
    candidate it supersedes (same first ``depth``; dated strictly before it; cosine of the two embeddings
    at least ``min_cosine``, or ``stated_min_cosine`` when ``changes`` says the later one states a change).

    Chains resolve to the latest: a candidate superseded by a later one that is itself superseded ends
    below both. Scores are carried along unchanged (they only order what follows ``depth``); a candidate
    without a date or an embedding neither supersedes nor is superseded."""
    head = [label for label, _ in ranked[:depth]]
    if len(head) < 2:
        return list(ranked)
    known = [label for label in head if label in embeddings and dates.get(label)]
    if len(known) < 2:
        return list(ranked)
    matrix = np.stack([embeddings[label] for label in known])
    cosine = matrix @ matrix.T
    index = {label: i for i, label in enumerate(known)}
    # The order is rebuilt by insertion: walk from the latest candidate back, so a chain ends latest first.
    order = list(head)
    score = dict(ranked[:depth])
    for later in sorted(known, key=lambda label: dates[label], reverse=True):
        threshold = stated_min_cosine if changes.get(later, False) else min_cosine
        position = order.index(later)
        target = None
        for earlier_position in range(position):
            earlier = order[earlier_position]
            if earlier not in index or not dates[earlier] < dates[later]:
                continue
            if sessions.get(earlier) == sessions.get(later):
                continue  # a later note of the same session elaborates, it does not revise
            if max_score_gap is not None and score[later] < score[earlier] - max_score_gap:
                continue
            if cosine[index[later], index[earlier]] >= threshold:
                target = earlier_position
                break
        if target is not None:
            order.insert(target, order.pop(position))
    return [(label, score[label]) for label in order] + list(ranked[depth:])


def states_settled(text: str) -> bool:
    """Whether a memory's text states where something was left: a decision, a completion, or a change."""
    return SETTLED_CUES.search(text) is not None or states_change(text)


def settled_first(
    ranked: Fused,
    *,
    sessions: Mapping[int, str],
    settled: Mapping[int, bool],
    embeddings: Mapping[int, np.ndarray],
    depth: int,
    min_cosine: float,
) -> Fused:
    """``ranked`` with each of its first ``depth`` candidates that ``settled`` marks placed just above the
    highest-ranked candidate of its own session that is not marked and is about the same thing (cosine of
    the two embeddings at least ``min_cosine``), within the same first ``depth``.

    A session's notes are about one piece of work; for a question about the present, the one that states
    the outcome answers it rather than the request or the details around it. Candidates without a session
    or an embedding are left where they are; the order among marked candidates is kept."""
    head = [label for label, _ in ranked[:depth]]
    order = list(head)
    for label in head:
        session = sessions.get(label)
        if not settled.get(label, False) or not session or label not in embeddings:
            continue
        position = order.index(label)
        for earlier_position in range(position):
            earlier = order[earlier_position]
            if sessions.get(earlier) != session or settled.get(earlier, False) or earlier not in embeddings:
                continue
            if float(embeddings[label] @ embeddings[earlier]) >= min_cosine:
                order.insert(earlier_position, order.pop(position))
                break
    score = dict(ranked[:depth])
    return [(label, score[label]) for label in order] + list(ranked[depth:])


def present_supersession(
    query: str,
    ranked: Fused,
    texts: Mapping[int, str],
    dates: Mapping[int, str],
    sessions: Mapping[int, str],
    embeddings: Mapping[int, np.ndarray],
    *,
    depth: int,
    min_cosine: float,
    stated_min_cosine: float,
    max_score_gap: float | None = None,
    always: bool = False,
    settled: bool = False,
) -> Fused:
    """:func:`supersede` for a question about the present (or every question with ``always``), then, with
    ``settled``, :func:`settled_first`."""
    if not always and not asks_about_now(query):
        return list(ranked)
    head: Sequence[int] = [label for label, _ in ranked[:depth]]
    changes = {label: states_change(texts.get(label, "")) for label in head}
    reordered = supersede(
        ranked,
        dates=dates,
        sessions=sessions,
        embeddings=embeddings,
        changes=changes,
        depth=depth,
        min_cosine=min_cosine,
        stated_min_cosine=stated_min_cosine,
        max_score_gap=max_score_gap,
    )
    if not settled:
        return reordered
    marks = {label: states_settled(texts.get(label, "")) for label in head}
    return settled_first(
        reordered, sessions=sessions, settled=marks, embeddings=embeddings, depth=depth, min_cosine=stated_min_cosine
    )
