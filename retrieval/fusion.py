"""Fusion: the BM25 list and the vector list -> one ranking, then neighbour smoothing.

Each method is a small pure function over :class:`RankedList` objects and per-list weights; the
configured one is chosen once by name (:func:`fuser`). Ties are broken by the best rank an item has in
any list, then by list order (as given), so the result is deterministic.

- ``convex`` (the default) — ``weights["bm25"] * bm25 / ceiling + weights["vector"] * cosine`` over
  the union of both lists' candidates. BM25 has no fixed scale, so it is divided by the query's
  ceiling, what a chunk matching every query term could score (``retrieval/bm25.py``): the keyword
  list then speaks with the weight of the share of the question it matched. Dividing by the best
  match's score instead (the recipe before, still used when a list has no ceiling) gives the top
  keyword match full marks even when it matches one common word of a paraphrased question, a fixed
  bonus no cosine difference can overcome, so hybrid fell below its own vector list on paraphrases.
  An item the BM25 list lacks scores 0 there (exact for an OR query that does not match it). The
  cosine already has a fixed scale and is used raw — not normalised over the candidates, which would
  stretch a flat cosine list to [0, 1] and let it outvote a decisive BM25 list — and it is the exact
  cosine for every candidate, BM25-only ones included (the caller computes those from the stored
  embeddings). Default weights 1.25 and 0.6 (chosen on calibration splits, docs/eval.md). Both parts
  having a fixed scale, the best fused score says how close the nearest memory is, which is what the
  ``min_relevance`` floor compares (:func:`evidence`). How decisive the keyword list is for this query
  sets its weight too: it counts fully only when its best match covers ``full_coverage`` (0.2) of the
  ceiling, and in proportion below (a paraphrase matches a word or two of the question anywhere).
- ``rrf`` — reciprocal-rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009): an item scores
  ``sum(weight / (k + rank))`` over the lists that hold it, ranks counted from 1. Ranks only: it throws
  away how much better the first BM25 match is than the tenth, which is why it loses to BM25 alone at
  small k on conversational memories (docs/semantic.md, "Why convex fusion").

:func:`session_pull` then moves each candidate part of the way up to its session's best match, and
:func:`neighbour_smoothing` lifts each candidate by a share of its best-scoring session neighbour, so an
answer that shares no word with the question still follows the turn that asked it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from obsmem.retrieval.ranked import RankedList

Fused = list[tuple[int, float]]
Fuser = Callable[..., Fused]


def _ordered(scores: dict[int, float], first_seen: dict[int, tuple[int, int]]) -> Fused:
    return sorted(scores.items(), key=lambda item: (-item[1], *first_seen[item[0]]))


def _first_seen(lists: Sequence[RankedList]) -> dict[int, tuple[int, int]]:
    seen: dict[int, tuple[int, int]] = {}
    for list_position, ranked in enumerate(lists):
        for rank, label in enumerate(ranked.labels):
            if label not in seen or (rank, list_position) < seen[label]:
                seen[label] = (rank, list_position)
    return seen


def reciprocal_rank_fusion(lists: Sequence[RankedList], weights: Mapping[str, float], k: float = 60.0) -> Fused:
    scores: dict[int, float] = {}
    for ranked in lists:
        weight = weights.get(ranked.name, 1.0)
        if weight == 0:
            continue
        for rank, label in enumerate(ranked.labels, start=1):
            scores[label] = scores.get(label, 0.0) + weight / (k + rank)
    return _ordered(scores, _first_seen(lists))


def convex_fusion(
    lists: Sequence[RankedList],
    weights: Mapping[str, float],
    cosines: Mapping[int, float] | None = None,
    full_coverage: float = 0.0,
) -> Fused:
    """``cosines`` maps candidates to their exact cosine; without it (or for a label it lacks) the vector
    list's own score is used, and 0 for an item only the BM25 list holds.

    ``full_coverage`` (with a ceiling): the keyword list keeps its whole weight only when its best match
    scores at least that share of the ceiling; below, the weight shrinks in proportion. A question asked
    in other words than its memory matches a few of its words anywhere (a best match of 0.10 of the
    ceiling is typical of a paraphrase, 0.3 to 0.4 of a question that shares its words with the answer),
    so the keyword list is then not decisive and the cosine decides. 0 turns it off."""
    lexical: dict[int, float] = {}
    similarity: dict[int, float] = {}
    ceiling: float | None = None
    for ranked in lists:
        if ranked.name == "bm25":
            lexical.update(ranked.items)
            ceiling = ranked.ceiling
        elif ranked.name == "vector":
            similarity.update(ranked.items)
    if cosines:
        similarity.update(cosines)
    best = max(lexical.values(), default=0.0)
    scale = ceiling if ceiling is not None and ceiling > 0 else best
    w_lexical, w_vector = weights.get("bm25", 0.0), weights.get("vector", 0.0)
    if full_coverage > 0 and ceiling is not None and ceiling > 0:
        w_lexical *= min(1.0, best / ceiling / full_coverage)
    scores: dict[int, float] = {}
    for ranked in lists:
        for label in ranked.labels:
            if label in scores:
                continue
            normalised = lexical.get(label, 0.0) / scale if scale > 0 else 0.0
            scores[label] = w_lexical * normalised + w_vector * similarity.get(label, 0.0)
    return _ordered(scores, _first_seen(lists))


def evidence(fused: Fused) -> float | None:
    """How close the nearest candidate is: the best fused score before smoothing (None without candidates).

    Smoothing only adds a share of a neighbour's score, so it says nothing new about whether anything
    matched; the floor is taken before it."""
    return max((score for _, score in fused), default=None)


def standout(lists: Sequence[RankedList], cosines: Mapping[int, float] | None = None) -> float:
    """How far the best cosine stands above the query's typical one: the best minus the mean over the
    vector list's candidates (0 without a vector list).

    A question nothing answers still has a nearest memory, often about as near as the fused evidence of
    an answerable question (a near miss: a plausible question about the topic next door). What differs
    is the shape of its list: nothing stands out, its best cosine is about its hundredth's. Added to the
    evidence, it separates the coding set's near misses better than the evidence alone (docs/eval.md)."""
    for ranked in lists:
        if ranked.name == "vector" and ranked.items:
            values = [cosines.get(label, score) if cosines else score for label, score in ranked.items]
            return max(values) - sum(values) / len(values)
    return 0.0


# The relevance of a question with no evidence at all: one that names what no indexed chunk holds, with a
# ``names`` measure (set by the searcher). Calibration keeps no margin from it.
NO_EVIDENCE = 0.0
RELEVANCE_MEASURES: tuple[str, ...] = (
    "evidence",
    "evidence+standout",
    "evidence+names",
    "evidence+standout+names",
)


def relevance(
    fused: Fused, lists: Sequence[RankedList], measure: str, cosines: Mapping[int, float] | None
) -> float | None:
    """What ``min_relevance`` compares for ``measure``: the fused evidence, plus how far the best cosine
    stands out (:func:`standout`) when the measure names ``standout``. None without candidates. (The
    measure's ``names`` part needs the index and is applied by the searcher: retrieval/names.py.)"""
    if measure not in RELEVANCE_MEASURES:
        raise ValueError(f"unknown relevance measure '{measure}' (known: {', '.join(RELEVANCE_MEASURES)})")
    best = evidence(fused)
    if best is None or "standout" not in measure.split("+"):
        return best
    return best + standout(lists, cosines)


def session_pull(fused: Fused, session_of: Mapping[int, str | None], weight: float) -> Fused:
    """``score + weight * (the best fused score in the candidate's session - score)``: each candidate moves
    ``weight`` of the way up to its session's best match, in the new order (ties keep the fused order). A
    candidate without a session does not move, nor does each session's best, so the order of the sessions'
    best matches is kept.

    A question is usually about one stretch of work or talk: the session that holds its strongest match is
    likely the one asked about, and its weaker matches (the second half of a multi-hop answer, a detail
    said in passing) deserve more than their own words give them. Neighbour smoothing reaches only the
    memories beside a match; this reaches the whole session, through the candidates alone (nothing read)."""
    if weight <= 0 or len(fused) < 2:
        return list(fused)
    best: dict[str, float] = {}
    for label, score in fused:  # best first: a session's first candidate is its best
        session = session_of.get(label)
        if session is not None:
            best.setdefault(session, score)
    pulled = []
    for label, score in fused:
        session = session_of.get(label)
        pulled.append((label, score if session is None else score + weight * (best[session] - score)))
    return sorted(pulled, key=lambda item: -item[1])


def neighbour_smoothing(fused: Fused, neighbours: Mapping[int, Sequence[int]], weight: float) -> Fused:
    """``score + weight * max(0, best neighbour's score)``: a strong match lifts the memories beside it.

    ``neighbours`` maps labels to the labels beside them (both ways). A neighbour that is not among
    ``fused`` enters with that share alone when it is positive. Ties keep the fused order; entrants tie
    after every candidate, by label.
    """
    if weight <= 0 or not fused:
        return list(fused)
    scores = dict(fused)
    order = {label: position for position, (label, _) in enumerate(fused)}
    reached = dict.fromkeys(scores)
    for label in scores:
        reached.update(dict.fromkeys(neighbours.get(label, ())))
    smoothed: dict[int, float] = {}
    score_of = scores.get
    for label in reached:
        best = 0.0  # a negative neighbour lifts nothing
        for other in neighbours.get(label, ()):
            score = score_of(other)
            if score is not None and score > best:
                best = score
        own = score_of(label)
        if own is not None:
            smoothed[label] = own + weight * best
        elif best > 0:
            smoothed[label] = weight * best
    tail = len(order)
    return sorted(smoothed.items(), key=lambda item: (-item[1], order.get(item[0], tail), item[0]))


def fuser(method: str, *, rrf_k: float = 60.0, full_coverage: float = 0.0) -> Fuser:
    """``fuse(lists, weights, cosines=None)`` for a method name; an unknown name is a ValueError."""
    if method == "rrf":
        return lambda lists, weights, cosines=None: reciprocal_rank_fusion(lists, weights, rrf_k)
    if method == "convex":
        return lambda lists, weights, cosines=None: convex_fusion(lists, weights, cosines, full_coverage)
    raise ValueError(f"unknown fusion method '{method}' (known: convex, rrf)")
