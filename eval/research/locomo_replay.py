"""Replay LoCoMo way (a) through the product's fusion with other vectors, pools and query handling.

A study tool, not part of the product: it measures ideas for the hybrid recipe on LoCoMo's turns
without a reindex per idea. ``capture`` ingests and indexes each conversation as ``obsmem eval locomo``
does (way a, default ``[semantic]`` settings), then keeps per question what the product's own code
computes: the keyword list with its scores and the query's ceiling (``Bm25List`` over the index), and
the query embedding; per turn the stored text's embedding and, for the context variants, embeddings of
the turn with the turn before it and with the turn after it (same encoder). It also keeps, per question,
the keyword list of an RM3-style expansion query (the rarest words of the first three fused turns that
the question lacks). ``replay`` then ranks every question with the product's
:func:`~obsmem.retrieval.fusion.convex_fusion` and :func:`~obsmem.retrieval.fusion.neighbour_smoothing`
(the neighbours are the turns before and after in the session, as the index links them) and prints
recall@5/10/50 on the calibration conversations (conv-26, conv-30), the held-out ones and all, as JSON.

The baseline variant reproduces the product's ``obsmem eval locomo`` figures with ``[semantic.fusion]
session_weight = 0`` (0.709 / 0.803 / 0.917 on the five development conversations); "session pull (0.3 of
the way to its best)" is the product's default recipe (0.723 / 0.815 / 0.919). Those figures are from a capture
made before sentence vectors; the capture embeds with the product's encoder and settings, so one made since
(``sentences = "mean"``, the default) gives the default recipe's 0.740 / 0.821 / 0.925 there, the product's
figures to the third decimal. Usage, with the package installed::

    python eval/research/locomo_replay.py capture --data locomo-dev5.json --cache lists.pkl
    python eval/research/locomo_replay.py replay --cache lists.pkl

Capturing encodes every turn three times (2,760 turns) and asks two keyword lists per question: about half an
hour on a busy two-core machine. Replaying takes a minute.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CALIBRATION = ("conv-26", "conv-30")
KS = (5, 10, 50)
EXPANSION_DOCUMENTS = 3  # fused turns the expansion words come from
EXPANSION_WORDS = 10  # words in the expansion query
Ranking = list[tuple[int, float]]  # turn position and score, best first


@dataclass
class CapturedQuestion:
    text: str
    evidence: list[int]  # turn positions
    keyword: list[tuple[int, float]]  # turn position, BM25 score, best first
    ceiling: float
    query: np.ndarray
    expansion: list[tuple[int, float]] = field(default_factory=list)
    expansion_ceiling: float = 0.0


@dataclass
class CapturedConversation:
    sample_id: str
    turn_ids: list[str]
    sessions: list[int]
    speakers: list[str]
    names: list[str]  # the two speakers
    own: np.ndarray  # embedding of each stored turn (what the index holds)
    with_previous: np.ndarray  # the turn before it, then the turn
    with_next: np.ndarray  # the turn, then the turn after it
    questions: list[CapturedQuestion]

    def neighbours(self) -> dict[int, list[int]]:
        """The turns beside each turn in its session (both ways), as the keyword documents link them."""
        beside: dict[int, list[int]] = {}
        for position in range(len(self.turn_ids)):
            near = []
            if position > 0 and self.sessions[position - 1] == self.sessions[position]:
                near.append(position - 1)
            if position + 1 < len(self.turn_ids) and self.sessions[position + 1] == self.sessions[position]:
                near.append(position + 1)
            beside[position] = near
        return beside


def fused_order(
    keyword: list[tuple[int, float]],
    ceiling: float,
    cosines: np.ndarray,
    neighbours: dict[int, list[int]],
    *,
    per_list: int = 100,
    fused_budget: int = 200,
    weights: dict[str, float] | None = None,
    full_coverage: float = 0.2,
    neighbour_weight: float = 0.2,
    bonus: np.ndarray | None = None,
    adjust: Callable[[list[tuple[int, float]]], list[tuple[int, float]]] | None = None,
) -> list[int]:
    """Turn positions in the product's fused and smoothed order (the hybrid recipe with these settings).

    ``bonus`` (per turn) is added to the fused score before smoothing (the speaker prior); ``adjust``
    rescores the fused list before smoothing (the session variants)."""
    from obsmem.retrieval.fusion import convex_fusion, neighbour_smoothing
    from obsmem.retrieval.ranked import RankedList

    bm25 = RankedList("bm25", list(keyword[:per_list]), ceiling=ceiling)
    top = np.argsort(-cosines, kind="stable")[:per_list]
    vector = RankedList("vector", [(int(i), float(cosines[i])) for i in top])
    labels = dict.fromkeys([*bm25.labels, *vector.labels])
    exact = {label: float(cosines[label]) for label in labels}
    fused = convex_fusion([bm25, vector], weights or {"bm25": 1.25, "vector": 0.6}, exact, full_coverage)
    if bonus is not None:
        fused = sorted(((label, score + float(bonus[label])) for label, score in fused), key=lambda item: -item[1])
    if adjust is not None:
        fused = sorted(adjust(fused), key=lambda item: -item[1])
    smoothed = neighbour_smoothing(fused, neighbours, neighbour_weight)
    return [label for label, _ in smoothed[:fused_budget]]


def recall(order: list[int], evidence: list[int], k: int) -> float:
    top = set(order[:k])
    return sum(1 for turn in evidence if turn in top) / len(evidence)


# -- capture ---------------------------------------------------------------------------------------------
def _in_context(documents: list[str], sessions: list[int], offset: int) -> list[str]:
    """Each turn with the turn ``offset`` (-1 before, +1 after) of its session, in the order said."""
    texts = []
    for position, document in enumerate(documents):
        other = position + offset
        if 0 <= other < len(documents) and sessions[other] == sessions[position]:
            pair = (documents[other], document) if offset < 0 else (document, documents[other])
            texts.append("\n".join(pair))
        else:
            texts.append(document)
    return texts


def _keyword_list(searcher: Any, project: str, query: str, turn_of_memory: dict[str, int]) -> tuple[Ranking, float]:
    """The product's keyword list for ``query`` (400 deep) as turn positions, and the query's ceiling."""
    from obsmem.indexer import MEMORY_SOURCES, Filter

    index = searcher.indexer.project(project)
    vectors = index.vectors()
    scoped = Filter(kind=MEMORY_SOURCES)
    with index.reader() as store:
        ranked = searcher.bm25.search(store, query, 400, vectors.narrowed(scoped), None, vectors.live)
        valid = store.validate(set(ranked.labels), scoped)
    turns = {label: turn_of_memory[valid[label].memory_id] for label in valid}
    return [(turns[label], score) for label, score in ranked.items if label in turns], float(ranked.ceiling or 0.0)


def _expansion(question: str, order: list[int], words: list[set[str]], frequency: Counter[str]) -> list[str]:
    """RM3-style expansion words: the rarest words of the first fused turns that the question lacks."""
    from obsmem.retrieval.bm25 import query_terms

    asked = set(query_terms(question))
    weight: Counter[str] = Counter()
    for turn in order[:EXPANSION_DOCUMENTS]:
        for word in words[turn] - asked:
            count = frequency[word]
            if count > 1:  # a word of one turn only expands to that turn
                weight[word] += math.log((len(words) - count + 0.5) / (count + 0.5))
    return [word for word, _ in weight.most_common(EXPANSION_WORDS)]


def _capture_conversation(memory: Any, conversation: Any) -> CapturedConversation:
    from obsmem.eval.ingest import index_project, load_locomo_conversation
    from obsmem.retrieval.bm25 import query_terms

    project, cites = load_locomo_conversation(memory, conversation, "a")
    index_project(memory, project)
    searcher = memory.search_modes.hybrid_searcher()
    embedder = memory.indexer.embedder
    turns = list(conversation.turns())
    position = {turn.dia_id: i for i, turn in enumerate(turns)}
    turn_of_memory = {memory_id: position[cited[0]] for memory_id, cited in cites.items()}
    documents = [turn.document for turn in turns]
    sessions = [turn.session for turn in turns]
    item = CapturedConversation(
        conversation.sample_id,
        [turn.dia_id for turn in turns],
        sessions,
        [turn.speaker for turn in turns],
        list(conversation.speakers),
        np.asarray(embedder.embed_documents(documents)),
        np.asarray(embedder.embed_documents(_in_context(documents, sessions, -1))),
        np.asarray(embedder.embed_documents(_in_context(documents, sessions, 1))),
        [],
    )
    words = [set(query_terms(text)) for text in documents]
    frequency = Counter(word for found in words for word in found)
    neighbours = item.neighbours()
    for question in conversation.questions:
        keyword, ceiling = _keyword_list(searcher, project, question.text, turn_of_memory)
        query = np.asarray(embedder.embed_query(question.text))
        evidence = [position.get(turn, -1) for turn in question.evidence]
        entry = CapturedQuestion(question.text, evidence, keyword, ceiling, query)
        order = fused_order(keyword, ceiling, item.own @ query, neighbours)
        expansion = _expansion(question.text, order, words, frequency)
        if expansion:
            entry.expansion, entry.expansion_ceiling = _keyword_list(
                searcher, project, " ".join(expansion), turn_of_memory
            )
        item.questions.append(entry)
    return item


def capture(data: Path, cache: Path) -> None:
    from obsmem.app import Obsmem
    from obsmem.eval.datasets.locomo import load_locomo
    from obsmem.settings import SemanticSettings, Settings

    captured: list[CapturedConversation] = []
    with tempfile.TemporaryDirectory(prefix="obsmem-replay-") as directory:
        settings = Settings(data_dir=Path(directory), semantic=SemanticSettings())
        with Obsmem(settings, background_indexing=False) as memory:
            for conversation in load_locomo(data):
                item = _capture_conversation(memory, conversation)
                captured.append(item)
                print(f"{item.sample_id}: {len(item.turn_ids)} turns, {len(item.questions)} questions", flush=True)
    with cache.open("wb") as handle:
        pickle.dump(captured, handle)


# -- replay ----------------------------------------------------------------------------------------------
Variant = Callable[[CapturedConversation, CapturedQuestion], list[int]]
Adjust = Callable[[list[tuple[int, float]]], list[tuple[int, float]]]


def _with_cosines(make: Callable[[CapturedConversation, np.ndarray], np.ndarray], **settings: Any) -> Variant:
    def run(conversation: CapturedConversation, question: CapturedQuestion) -> list[int]:
        cosines = make(conversation, question.query)
        return fused_order(question.keyword, question.ceiling, cosines, conversation.neighbours(), **settings)

    return run


def _neighbour_vectors(conversation: CapturedConversation, share: float) -> np.ndarray:
    """Each turn's vector plus ``share`` of each session neighbour's, renormalised (no new encoding)."""
    own = conversation.own
    summed = own.copy()
    for position, near in conversation.neighbours().items():
        for other in near:
            summed[position] += share * own[other]
    return summed / np.linalg.norm(summed, axis=1, keepdims=True)


def _speaker_prior(bonus: float) -> Variant:
    def run(conversation: CapturedConversation, question: CapturedQuestion) -> list[int]:
        named = [name for name in conversation.names if name.lower() in question.text.lower()]
        extra = None
        if len(named) == 1:
            extra = bonus * (np.asarray(conversation.speakers) == named[0])
        return fused_order(
            question.keyword,
            question.ceiling,
            conversation.own @ question.query,
            conversation.neighbours(),
            bonus=extra,
        )

    return run


_QUERY_EMBEDDINGS: dict[str, np.ndarray] = {}  # question text as rewritten -> its embedding (replay only)
_EMBEDDER: list[Any] = []  # the product's default embedder, made on first use


def _embedded(text: str) -> np.ndarray:
    """The product's query embedding of ``text`` (the default encoder, made once; kept per text)."""
    if text not in _QUERY_EMBEDDINGS:
        if not _EMBEDDER:
            from obsmem.indexer.embedders import make_embedder
            from obsmem.settings import SemanticSettings

            _EMBEDDER.append(make_embedder(SemanticSettings().embedding))
        _QUERY_EMBEDDINGS[text] = np.asarray(_EMBEDDER[0].embed_query(text))
    return _QUERY_EMBEDDINGS[text]


def _names_rewritten(question: CapturedQuestion, names: list[str], how: str) -> str:
    """The question with the conversation's speaker names replaced by "they" / "their" or dropped."""
    pattern = re.compile(r"\b(" + "|".join(re.escape(name) for name in names) + r")('s)?\b")
    if how == "they":
        return pattern.sub(lambda match: "their" if match.group(2) else "they", question.text)
    return " ".join(pattern.sub("", question.text).split())


def _names_weighted(how: str, share: float) -> Variant:
    """The default recipe (session pull 0.3) with the query vector ``(1 - share) x`` the question's plus
    ``share x`` that of the question with its speaker names rewritten (``how``), renormalised: the names at
    part weight (what ``[semantic.fusion] common_word_share`` does with the words most chunks hold)."""
    recipe = _adjusted(_pull(0.3))

    def run(conversation: CapturedConversation, question: CapturedQuestion) -> list[int]:
        rewritten = _embedded(_names_rewritten(question, conversation.names, how))
        mixed = (1 - share) * question.query + share * rewritten
        query = CapturedQuestion(
            question.text, question.evidence, question.keyword, question.ceiling, mixed / np.linalg.norm(mixed)
        )
        return recipe(conversation, query)

    return run


def _vector_feedback(documents: int, share: float) -> Variant:
    """Rocchio on the query vector: add ``share`` of the mean vector of the first fused turns, rank again."""

    def run(conversation: CapturedConversation, question: CapturedQuestion) -> list[int]:
        neighbours = conversation.neighbours()
        first = fused_order(question.keyword, question.ceiling, conversation.own @ question.query, neighbours)
        moved = question.query + share * conversation.own[first[:documents]].mean(axis=0)
        moved /= np.linalg.norm(moved)
        return fused_order(question.keyword, question.ceiling, conversation.own @ moved, neighbours)

    return run


def _keyword_feedback(share: float) -> Variant:
    """RM3-style: the keyword list scores ``(1 - share) x question + share x expansion`` (each over its own
    ceiling, the expansion weighed by the question's coverage as fusion weighs the list)."""

    def run(conversation: CapturedConversation, question: CapturedQuestion) -> list[int]:
        cosines = conversation.own @ question.query
        if not question.expansion or question.ceiling <= 0 or question.expansion_ceiling <= 0:
            return fused_order(question.keyword, question.ceiling, cosines, conversation.neighbours())
        asked = dict(question.keyword[:100])
        expanded = dict(question.expansion[:100])
        coverage = min(1.0, max(asked.values(), default=0.0) / question.ceiling / 0.2)
        blended = {
            turn: (1 - share) * asked.get(turn, 0.0) / question.ceiling
            + share * coverage * expanded.get(turn, 0.0) / question.expansion_ceiling
            for turn in set(asked) | set(expanded)
        }
        keyword = sorted(blended.items(), key=lambda item: -item[1])
        weights = {"bm25": 1.25 * coverage, "vector": 0.6}
        return fused_order(
            keyword, 1.0, cosines, conversation.neighbours(), per_list=200, weights=weights, full_coverage=0.0
        )

    return run


def _session_lift(sessions: list[int], share: float, best: int) -> Adjust:
    """Each candidate gains ``share`` x the mean of the ``best`` highest fused scores among the other
    candidates of its session."""

    def adjust(fused: list[tuple[int, float]]) -> list[tuple[int, float]]:
        by_session: dict[int, list[float]] = {}
        for label, score in fused:
            by_session.setdefault(sessions[label], []).append(score)
        tops = {session: sorted(scores, reverse=True)[: best + 1] for session, scores in by_session.items()}
        adjusted = []
        for label, score in fused:
            others = list(tops[sessions[label]])
            if score in others:
                others.remove(score)
            lift = share * (sum(others[:best]) / best) if others else 0.0
            adjusted.append((label, score + lift))
        return adjusted

    return adjust


def _session_pull(sessions: list[int], share: float) -> Adjust:
    """The product's session evidence (:func:`~obsmem.retrieval.fusion.session_pull`) with weight ``share``."""
    from obsmem.retrieval.fusion import session_pull

    def adjust(fused: list[tuple[int, float]]) -> list[tuple[int, float]]:
        return session_pull(fused, {label: str(sessions[label]) for label, _ in fused}, share)

    return adjust


def _two_away(sessions: list[int], second: float) -> Adjust:
    """Each candidate gains ``second`` x the better fused score of the turns two away in its session."""

    def adjust(fused: list[tuple[int, float]]) -> list[tuple[int, float]]:
        scores = dict(fused)
        adjusted = []
        for label, score in fused:
            lift = 0.0
            for other in (label - 2, label + 2):
                if 0 <= other < len(sessions) and sessions[other] == sessions[label]:
                    lift = max(lift, second * max(0.0, scores.get(other, 0.0)))
            adjusted.append((label, score + lift))
        return adjusted

    return adjust


def _adjusted(*makers: Callable[[list[int]], Adjust], **settings: Any) -> Variant:
    """The baseline with each adjustment applied to the fused list in turn, before smoothing."""

    def run(conversation: CapturedConversation, question: CapturedQuestion) -> list[int]:
        steps = [make(conversation.sessions) for make in makers]

        def adjust(fused: list[tuple[int, float]]) -> list[tuple[int, float]]:
            for step in steps:
                fused = step(fused)
            return fused

        cosines = conversation.own @ question.query
        neighbours = conversation.neighbours()
        return fused_order(question.keyword, question.ceiling, cosines, neighbours, adjust=adjust, **settings)

    return run


def _session(share: float, best: int = 1) -> Callable[[list[int]], Adjust]:
    return lambda sessions: _session_lift(sessions, share, best)


def _pull(share: float) -> Callable[[list[int]], Adjust]:
    return lambda sessions: _session_pull(sessions, share)


def _wider(second: float) -> Callable[[list[int]], Adjust]:
    return lambda sessions: _two_away(sessions, second)


def _diverse(share: float, keep: int) -> Variant:
    """The product's default recipe (session pull 0.3), then below its first ``keep`` turns the rest taken
    greedily by rank plus ``share`` ranks for each turn of the same session already taken: a list question
    ("What activities has Melanie done with her family?") has its evidence in many sessions."""
    recipe = _adjusted(_pull(0.3))

    def run(conversation: CapturedConversation, question: CapturedQuestion) -> list[int]:
        order = recipe(conversation, question)
        taken = list(order[:keep])
        count = Counter(conversation.sessions[turn] for turn in taken)
        rest = list(enumerate(order[keep:]))
        while rest and len(taken) < max(KS):
            best = min(rest, key=lambda item: item[0] + share * count[conversation.sessions[item[1]]])
            rest.remove(best)
            taken.append(best[1])
            count[conversation.sessions[best[1]]] += 1
        return taken + [turn for _, turn in rest]

    return run


VARIANTS: dict[str, Variant] = {
    "baseline (the product with session_weight 0)": _with_cosines(lambda c, q: c.own @ q),
    "wider pool (400 per list, 400 fused)": _with_cosines(lambda c, q: c.own @ q, per_list=400, fused_budget=400),
    "context vector: turn before + turn": _with_cosines(lambda c, q: c.with_previous @ q),
    "context vector: turn + turn after": _with_cosines(lambda c, q: c.with_next @ q),
    "max-sim of turn, before + turn, turn + after": _with_cosines(
        lambda c, q: np.maximum(c.own @ q, np.maximum(c.with_previous @ q, c.with_next @ q))
    ),
    "mean cosine 0.5 turn + 0.25 before + 0.25 after": _with_cosines(
        lambda c, q: 0.5 * (c.own @ q) + 0.25 * (c.with_previous @ q) + 0.25 * (c.with_next @ q)
    ),
    "the same, vector weight 0.8": _with_cosines(
        lambda c, q: 0.5 * (c.own @ q) + 0.25 * (c.with_previous @ q) + 0.25 * (c.with_next @ q),
        weights={"bm25": 1.25, "vector": 0.8},
    ),
    "neighbour-averaged stored vectors (share 0.25)": _with_cosines(lambda c, q: _neighbour_vectors(c, 0.25) @ q),
    "neighbour-averaged stored vectors (share 0.5)": _with_cosines(lambda c, q: _neighbour_vectors(c, 0.5) @ q),
    "speaker prior +0.02": _speaker_prior(0.02),
    "speaker prior +0.05": _speaker_prior(0.05),
    "vector feedback (3 turns, 0.5)": _vector_feedback(3, 0.5),
    "vector feedback (5 turns, 1.0)": _vector_feedback(5, 1.0),
    "keyword feedback (share 0.1)": _keyword_feedback(0.1),
    "keyword feedback (share 0.2)": _keyword_feedback(0.2),
    "keyword feedback (share 0.3)": _keyword_feedback(0.3),
    "session evidence (0.1 x its best other match)": _adjusted(_session(0.1)),
    "session evidence (0.2 x its best other match)": _adjusted(_session(0.2)),
    "session evidence (0.3 x its best other match)": _adjusted(_session(0.3)),
    "session evidence (0.4 x its best other match)": _adjusted(_session(0.4)),
    "session evidence (0.5 x its best other match)": _adjusted(_session(0.5)),
    "session evidence (0.2 x mean of its 3 best other matches)": _adjusted(_session(0.2, 3)),
    "session evidence (0.3 x mean of its 2 best other matches)": _adjusted(_session(0.3, 2)),
    "wider smoothing (0.1 two turns away)": _adjusted(_wider(0.1)),
    "session pull (0.1 of the way to its best)": _adjusted(_pull(0.1)),
    "session pull (0.2 of the way to its best)": _adjusted(_pull(0.2)),
    "session pull (0.3 of the way to its best)": _adjusted(_pull(0.3)),
    "session pull (0.4 of the way to its best)": _adjusted(_pull(0.4)),
    "session pull (0.5 of the way to its best)": _adjusted(_pull(0.5)),
    "session diversity 1 below the first 10": _diverse(1.0, 10),
    "session diversity 2 below the first 10": _diverse(2.0, 10),
    "session diversity 4 below the first 10": _diverse(4.0, 10),
    "session diversity 2 from the first": _diverse(2.0, 0),
    "speaker names at half weight (replaced by they)": _names_weighted("they", 0.5),
    "speaker names at three-quarter weight (replaced by they, 0.25)": _names_weighted("they", 0.25),
    "speaker names left out (replaced by they, 1.0)": _names_weighted("they", 1.0),
    "speaker names at half weight (dropped)": _names_weighted("drop", 0.5),
    "speaker names left out (dropped, 1.0)": _names_weighted("drop", 1.0),
    "session pull 0.3 + wider smoothing 0.1": _adjusted(_pull(0.3), _wider(0.1)),
    "session pull 0.3 + wider smoothing 0.05": _adjusted(_pull(0.3), _wider(0.05)),
    "session pull 0.3, neighbour share 0.3": _adjusted(_pull(0.3), neighbour_weight=0.3),
    "session pull 0.3, neighbour share 0.15": _adjusted(_pull(0.3), neighbour_weight=0.15),
    "session evidence 0.2 + wider smoothing 0.1": _adjusted(_session(0.2), _wider(0.1)),
    "session evidence 0.2, neighbour share 0.1": _adjusted(_session(0.2), neighbour_weight=0.1),
    "session evidence 0.2, neighbour share 0.3": _adjusted(_session(0.2), neighbour_weight=0.3),
}


def replay(cache: Path, only: str = "") -> dict[str, dict[str, dict[str, float]]]:
    """Every variant (or those whose name holds ``only``, and the baseline) on the captured lists."""
    with cache.open("rb") as handle:
        captured: list[CapturedConversation] = pickle.load(handle)  # noqa: S301 - our own file
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for name, variant in VARIANTS.items():
        if only and only not in name and not name.startswith("baseline"):
            continue
        by_split: dict[str, list[list[float]]] = {"calibration": [], "held_out": [], "all": []}
        for conversation in captured:
            split = "calibration" if conversation.sample_id in CALIBRATION else "held_out"
            for question in conversation.questions:
                order = variant(conversation, question)
                row = [recall(order, question.evidence, k) for k in KS]
                by_split[split].append(row)
                by_split["all"].append(row)
        figures[name] = {
            split: {f"recall@{k}": round(float(np.mean([row[i] for row in rows])), 4) for i, k in enumerate(KS)}
            for split, rows in by_split.items()
            if rows
        }
    return figures


def misses_at(cache: Path, k: int = 50) -> dict[str, float]:
    """Where the evidence turns the baseline leaves out of its first ``k`` stand in each list: how many,
    how many match a keyword at all, and their median rank by BM25 (among matches) and by cosine."""
    with cache.open("rb") as handle:
        captured: list[CapturedConversation] = pickle.load(handle)  # noqa: S301 - our own file
    missed, keyword_ranks, cosine_ranks = 0, [], []
    for conversation in captured:
        neighbours = conversation.neighbours()
        for question in conversation.questions:
            cosines = conversation.own @ question.query
            top = set(fused_order(question.keyword, question.ceiling, cosines, neighbours)[:k])
            by_keyword = {turn: rank for rank, (turn, _) in enumerate(question.keyword, start=1)}
            by_cosine = {int(turn): rank for rank, turn in enumerate(np.argsort(-cosines, kind="stable"), start=1)}
            for turn in question.evidence:
                if turn < 0 or turn in top:
                    continue
                missed += 1
                cosine_ranks.append(by_cosine[turn])
                if turn in by_keyword:
                    keyword_ranks.append(by_keyword[turn])
    return {
        "missed": missed,
        "with a keyword match": len(keyword_ranks),
        "median BM25 rank of those": float(np.median(keyword_ranks)) if keyword_ranks else 0.0,
        "median cosine rank": float(np.median(cosine_ranks)) if cosine_ranks else 0.0,
        "turns per conversation (mean)": float(np.mean([len(c.turn_ids) for c in captured])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    capture_parser = commands.add_parser("capture", help="index LoCoMo way (a) and keep each question's lists")
    capture_parser.add_argument("--data", type=Path, required=True, help="a LoCoMo JSON file")
    capture_parser.add_argument("--cache", type=Path, required=True, help="where to write the captured lists")
    replay_parser = commands.add_parser("replay", help="rank the captured lists with every variant (JSON)")
    replay_parser.add_argument("--cache", type=Path, required=True)
    replay_parser.add_argument("--only", default="", help="only the variants whose name holds this text")
    arguments = parser.parse_args()
    if arguments.command == "capture":
        capture(arguments.data, arguments.cache)
    else:
        figures = replay(arguments.cache, arguments.only)
        print(json.dumps({"variants": figures, "missed at 50": misses_at(arguments.cache)}, indent=2))


if __name__ == "__main__":
    main()
