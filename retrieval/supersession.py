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
from obsmem.settings import SupersessionSettings

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


# What a memory says it replaced, as the Observer is told to write a change ("Port changed from 8080 to 9090
# (supersedes the earlier 8080)"): after a verb of change, the words from "from" up to "to" in the same
# clause; after "supersedes" or "instead of", up to the end of the clause; after "replaces", up to "with" or
# "by". The passive ("superseded by ADR-12", "replaced by Valkey") names the new value, so it is left out, and
# a phrase never runs past a sentence's end (a full stop before a space; "1.78.0" keeps its dots).
_CLAUSE_CHAR = r"(?:[^;()\n.]|\.(?=\S))"
_PHRASE = _CLAUSE_CHAR + "{1,60}?"
_CLAUSE_END = r"\s*(?:[;()\n]|[.,](?:\s|$)|$)"
_CHANGE_VERB = (
    r"(?:chang|mov|switch|bump|rais|reduc|lower|shorten|lengthen|extend|increas|decreas|upgrad|downgrad|"
    r"migrat|updat|convert|renam|replac)\w*"
)
_REPLACED = re.compile(
    rf"\b{_CHANGE_VERB}\b{_CLAUSE_CHAR}{{0,40}}?\bfrom\s+(?P<source>{_PHRASE})\s+(?:to|into)\b"
    rf"|\bsupersed(?:es|ing)\s+(?!by\b)(?P<superseded>{_PHRASE}){_CLAUSE_END}"
    rf"|\binstead\s+of\s+(?P<instead>{_PHRASE}){_CLAUSE_END}"
    rf"|\breplac(?:e|es|ed|ing)\s+(?!by\b|with\b)(?P<replaced>{_PHRASE})\s+(?:with|by)\b",
    re.IGNORECASE,
)
# Words that name no value of their own in what a change says it replaced ("the earlier 8080", "the March
# decision to stay on Postgres"): they cannot tie a change to the memory it replaced.
_NOT_A_VALUE = frozenset(
    """the a an earlier previous old former prior original initial first last decision decisions setting value
    it its this that one two ones them using use used on in at of for from with and or to by per default""".split()  # noqa: SIM905
)
# A question anchored in the past: it asks what was, not what is ("Why did we pick Sidekiq?", "How has the
# limit changed?"). A present-state word outweighs it ("How long does a login last these days?").
PAST_CUES = re.compile(
    r"\b(was|were|did|had|used to|originally|initially|at first|earlier|previous|previously|former|"
    r"formerly|ago|back then|history|changed|why)\b",
    re.IGNORECASE,
)
_VALUE_WORD = re.compile(r"[a-z0-9][a-z0-9._:=+-]*[a-z0-9]|[a-z0-9]", re.IGNORECASE)


def value_words(text: str) -> set[str]:
    """The words of ``text`` as values are written (``1.78.0``, ``max-age=3600``, ``zxing-cpp``), lowercased."""
    return {word.lower() for word in _VALUE_WORD.findall(text)}


def replaced_values(text: str) -> list[set[str]]:
    """What ``text`` says it replaced, each as the set of its value words (lowercased; one-letter units and
    words that name no value left out): ``"bumped from 1.78.0 to 1.85.0 (supersedes 1.78)"`` ->
    ``[{"1.78.0"}, {"1.78"}]``."""
    found = []
    for match in _REPLACED.finditer(text):
        phrase = next(group for group in match.groups() if group is not None)
        words = {word for word in value_words(phrase) if len(word) > 1 or word.isdigit()} - _NOT_A_VALUE
        if words:
            found.append(words)
    return found


def names_replaced(later: str, earlier: str) -> bool:
    """Whether ``later`` says it replaced a value that ``earlier`` states: every word of one thing it names as
    replaced occurs in ``earlier`` as a whole word (case-insensitive)."""
    return holds_a_replaced_value(replaced_values(later), value_words(earlier))


def holds_a_replaced_value(replaced: list[set[str]], held: set[str]) -> bool:
    """Whether ``held`` (a memory's value words) holds every word of one of ``replaced``."""
    return any(words <= held for words in replaced)


def asks_about_the_past(query: str) -> bool:
    """Whether ``query`` is anchored in the past: a named month or year, or a past-tense or history word
    without a present-state word."""
    if NAMED_DATE.search(query) is not None:
        return True
    return PAST_CUES.search(query) is not None and PRESENT_CUES.search(query) is None


def stated_supersession(
    ranked: Fused,
    *,
    texts: Mapping[int, str],
    dates: Mapping[int, str],
    sessions: Mapping[int, str],
    embeddings: Mapping[int, np.ndarray],
    depth: int,
    min_cosine: float,
    changes: Mapping[int, list[set[str]]] | None = None,
) -> Fused:
    """``ranked`` with each of its first ``depth`` candidates placed just above the highest-ranked earlier
    candidate whose value it says it replaced (:func:`names_replaced`; dated strictly before it, from
    another session, as in :func:`supersede`: within one session "instead of" is as often an example as a
    revision; cosine of the two embeddings at least ``min_cosine``, so a number shared by chance does not tie
    two unrelated memories). The pipeline's own record of a change, so no question word is needed. Chains
    resolve to the latest. ``changes``: each head candidate's :func:`replaced_values`, when the caller has
    them already."""
    head = [label for label, _ in ranked[:depth]]
    if changes is None:
        changes = {label: replaced_values(texts.get(label, "")) for label in head}
    if not any(changes.get(label) for label in head):
        return list(ranked)
    held = {label: value_words(texts.get(label, "")) for label in head}
    order = list(head)
    score = dict(ranked[:depth])
    dated = [label for label in head if changes.get(label) and dates.get(label) and label in embeddings]
    # Earliest change first: a change that replaced one already moved up finds it at its new place, so a
    # chain (16 replaced 14, then 18 replaced 16) ends latest first.
    for later in sorted(dated, key=lambda label: dates[label]):
        position = order.index(later)
        for earlier_position in range(position):
            earlier = order[earlier_position]
            if earlier not in embeddings or not dates.get(earlier) or not dates[earlier] < dates[later]:
                continue
            if sessions.get(earlier) and sessions.get(earlier) == sessions.get(later):
                continue
            if float(embeddings[later] @ embeddings[earlier]) < min_cosine:
                continue
            if holds_a_replaced_value(changes[later], held[earlier]):
                # Never above a candidate dated after it: a newer revision keeps its place above.
                newer = [at for at in range(earlier_position, position) if dates.get(order[at], "") > dates[later]]
                order.insert(newer[-1] + 1 if newer else earlier_position, order.pop(position))
                break
    return [(label, score[label]) for label in order] + list(ranked[depth:])


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


def names_replacements(query: str, config: SupersessionSettings) -> bool:
    """Whether named replacements (:func:`stated_supersession`) apply to ``query``: with supersession on, for
    any question not anchored in the past."""
    return config.enabled and config.named_replacements and not asks_about_the_past(query)


def latest_first(
    query: str,
    ranked: Fused,
    *,
    texts: Mapping[int, str],
    dates: Mapping[int, str],
    sessions: Mapping[int, str],
    embeddings: Mapping[int, np.ndarray],
    changes: Mapping[int, list[set[str]]],
    config: SupersessionSettings,
) -> Fused:
    """Supersession's rules in their order over the first ``config.depth`` candidates: named replacements when
    ``changes`` (each head candidate's :func:`replaced_values`, empty where they do not apply) names any,
    then the rule for the present, which checks the question itself."""
    if any(changes.values()):
        ranked = stated_supersession(
            ranked,
            texts=texts,
            dates=dates,
            sessions=sessions,
            embeddings=embeddings,
            depth=config.depth,
            min_cosine=config.stated_min_cosine,
            changes=changes,
        )
    return present_supersession(
        query,
        ranked,
        texts,
        dates,
        sessions,
        embeddings,
        depth=config.depth,
        min_cosine=config.min_cosine,
        stated_min_cosine=config.stated_min_cosine,
        max_score_gap=config.max_score_gap,
        always=not config.present_only,
        settled=config.settled_first,
    )
