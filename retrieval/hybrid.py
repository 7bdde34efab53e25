"""Hybrid ``memory_search``: BM25 and vector lists, fusion, smoothing, optional rerank, chunks -> memories.

Order of work for one query:

1. readiness — an uninitialised (never built) or still-empty index is
   ``index_building`` with ``indexed_count`` and ``source_count``, one built with other settings
   a settings mismatch (``SemanticSettingsMismatch``); never a silent fallback to exact;
2. the query embedding — a model call, made with no lock or transaction held; a question that writes
   words most indexed chunks hold (``common_word_share``) is embedded without them too, in the same batch,
   and searched with the mean of the two (common_words.py);
3. in one read snapshot: the keyword list (BM25 over the contextual keyword documents) and the vector
   list (each up to ``candidates_per_list`` valid chunks), with any date or session filter applied
   first; every candidate chunk is checked against the current memory (same memory id, same content
   hash, inside the filter), so deleted or edited memories never come back from stale chunks;
4. fusion (convex by default: BM25 scaled by what the query could score, blended with the exact cosine
   of every candidate); with ``min_relevance`` set and no rerank, a search whose relevance (the best
   fused score, plus how far the best cosine stands out with ``relevance_measure``) is below it ends
   here with no hits and ``nothing_close``; then neighbour smoothing (each candidate gains a share of
   its best session neighbour's score; neighbours that were not candidates may enter, after the same
   checks), cut to ``fused_candidates`` chunks; with ``[semantic.supersession]`` on, a question about
   the present sees the latest memory about a thing above the ones it revised (supersession.py), after
   the chunks among the first ten that write more of the question's identifiers (``#2510``,
   ``build_filters()``) went above those that write fewer (``named_first``, names.py);
5. the optional rerank (after the snapshot is released), then the chunks collapse to their memories in
   order and the limit applies.

``truncated`` says a candidate budget or the limit was reached; ``partial`` says memories are still
waiting to be indexed (search served what is indexed). No scores are returned.

:meth:`HybridSearcher.run` is the same search with a :class:`SearchPlan` (one list alone, no rerank, no
floor) and the ranking after each stage (:class:`StageRankings`): the evaluation harness measures the
modes and the candidate stages through it, so what it measures is this code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np

from obsmem.errors import EmbeddingUnavailable, IndexBuilding, ValidationFailed
from obsmem.indexer import (
    EVENT_SOURCES,
    MEMORY_SOURCES,
    Embedder,
    Filter,
    IndexReader,
    IndexState,
    ProjectIndex,
    SemanticIndexer,
    ValidChunk,
    VectorSet,
)
from obsmem.retrieval.bm25 import ENGLISH_STOPWORDS, Bm25List
from obsmem.retrieval.common_words import MIN_CHUNKS as COMMON_MIN_CHUNKS
from obsmem.retrieval.common_words import common_words, estimated_count, half_weighted, may_be_common, without_words
from obsmem.retrieval.fusion import NO_EVIDENCE, Fused, fuser, neighbour_smoothing, relevance, session_pull
from obsmem.retrieval.names import CALENDAR_WORDS, named_first, question_names, unknown_names
from obsmem.retrieval.ranked import RankedList
from obsmem.retrieval.rerank import Reranker, rerank_order
from obsmem.retrieval.results import Hit, SearchResult
from obsmem.retrieval.search import SearchRequest
from obsmem.retrieval.supersession import asks_about_now, latest_first, names_replacements, replaced_values
from obsmem.settings import SemanticSettings

# Extra candidates fetched per list, beyond the budget, to make up for chunks that fail the stale check.
MAX_STALE_MARGIN = 1000
# The kind of indexed source each search scope keeps (None: both).
SCOPE_KINDS: dict[str, str | None] = {"memories": MEMORY_SOURCES, "conversation": EVENT_SOURCES, "all": None}


# A candidate chunk that passed validation (still its memory's, inside the filter), as the index reads it.
Candidate: TypeAlias = ValidChunk


def vector_list(
    vectors: VectorSet,
    query: np.ndarray,
    k: int,
    where: Filter,
    exact_max: int | None,
    slots: np.ndarray | None = None,
) -> RankedList:
    """Top-k chunks by cosine similarity among those passing the filter (filter first, then rank).

    ``slots`` is the filter's selection when the caller has already made it. A filtered selection is
    ranked by an exact scan unless ``exact_max`` is set and the selection is larger."""
    result = RankedList("vector")
    if where.is_open:
        items = vectors.approximate(query, k + 1)
        if items is None:
            items = vectors.exact(query, None, k + 1)
    else:
        if slots is None:
            slots = vectors.selection(where)
        items = None
        if exact_max is not None and len(slots) > exact_max:
            items = vectors.approximate(query, k + 1, where)
        if items is None:
            items = vectors.exact(query, slots, k + 1)
    result.full = len(items) > k
    result.items = items[:k]
    return result


LISTS: tuple[str, ...] = ("bm25", "vector")


@dataclass(frozen=True)
class SearchPlan:
    """Which stages one hybrid search runs. ``memory_search`` always uses the default plan.

    ``lists`` names the candidate lists to compute; a single list is returned in its own order (no
    fusion). ``rerank=False`` skips a configured reranker; ``floor=False`` keeps the reranker but ignores
    its ``min_score``, and ignores ``min_relevance`` (calibration needs the unfloored order and scores).
    """

    lists: tuple[str, ...] = LISTS
    rerank: bool = True
    floor: bool = True

    def __post_init__(self) -> None:
        if not self.lists or any(name not in LISTS for name in self.lists) or len(set(self.lists)) != len(self.lists):
            raise ValueError("lists must name 'bm25' and/or 'vector', each once")


@dataclass
class StageRankings:
    """Memory ids, best first, after each stage of one search (a memory ranks where its best chunk does).

    ``bm25`` and ``vector`` are the candidate lists at their budget (None when not computed), ``fused``
    the fused and smoothed candidates at the fused budget (after supersession when it is on, before any
    rerank), ``final`` the whole final ranking: the hits are its first ``limit`` entries.
    ``rerank_scores`` (internal, never shown to users) are the raw reranker scores of ``final``'s
    memories, or None without a rerank. ``evidence`` (internal too) is what
    ``min_relevance`` compares: the best fused score before smoothing, plus how far the best cosine stands
    out with ``relevance_measure = "evidence+standout"``, and 0 with ``...+names`` when the question names
    something no indexed chunk holds (None for one list alone); ``unknown_names`` are those names.
    """

    bm25: list[str] | None = None
    vector: list[str] | None = None
    fused: list[str] = field(default_factory=list)
    final: list[str] = field(default_factory=list)
    rerank_scores: list[float] | None = None
    evidence: float | None = None
    unknown_names: list[str] = field(default_factory=list)


def _memories(labels: Sequence[int], valid: dict[int, Candidate]) -> list[str]:
    seen: dict[str, None] = {}
    for label in labels:
        candidate = valid.get(label)
        if candidate is not None:
            seen.setdefault(candidate.memory_id, None)
    return list(seen)


@dataclass(frozen=True)
class Opening:
    """What one search knows before its snapshot opens: the project's index, the kind of source the scope
    searches, whether the keyword list runs and the query vector (None when the vector list does not run)."""

    index: ProjectIndex
    kind: str | None
    use_bm25: bool
    query_vector: np.ndarray | None


class HybridSearcher:
    def __init__(self, indexer: SemanticIndexer, settings: SemanticSettings, reranker: Reranker | None) -> None:
        self.indexer = indexer
        self.settings = settings
        self.reranker = reranker
        self.bm25 = Bm25List(settings.bm25)
        self.fuse = fuser(
            settings.fusion.method, rrf_k=settings.fusion.rrf_k, full_coverage=settings.fusion.bm25_full_coverage
        )
        self.weights = settings.fusion.weights
        self.exact_cosines = settings.fusion.method == "convex"
        self.neighbour_weight = settings.fusion.neighbour_weight
        self.session_weight = settings.fusion.session_weight
        self.supersession = settings.supersession
        # (Project, kind of source) whose index the last search of that kind found ready: their next search
        # skips the check made before the query embedding (a snapshot of its own) and reads the index state
        # once, in the search's snapshot, which checks it again all the same. By kind: a scope whose kind the
        # index holds nothing of (memories of a project of events alone) does not cost the other scopes it.
        self._ready: set[tuple[str, str | None]] = set()
        # The stopwords' index tokens (common words).
        self._stop_token_set: frozenset[str] | None = None

    def _building(self, project: str, store: IndexReader, compatible: bool, kind: str | None) -> IndexBuilding:
        """``index_building`` with the counts of the kind of source the search looks in."""
        if self.indexer.is_indexing(project):
            message = "the semantic index is still being built; search again shortly or use mode 'exact'"
        else:  # nothing will build it unless asked: say what to run
            message = (
                f"the semantic index is not built and nothing is indexing it now: run `obsmem index {project}` "
                "(or start `obsmem serve`, which indexes in the background), or use mode 'exact'"
            )
        return IndexBuilding(
            message,
            indexed_count=store.indexed_count(kind) if compatible else 0,
            source_count=store.source_count(kind),
        )

    def _check_scope(self, index: ProjectIndex, kind: str | None) -> None:
        """Refuse a scope this backend's index does not hold (``mode_unavailable``)."""
        if kind != MEMORY_SOURCES and not index.indexes_events:
            raise ValidationFailed(
                "hybrid search of the conversation needs semantic.index.events = true; use mode 'exact'",
                code="mode_unavailable",
                field="scope",
            )

    def _open(self, project: str, request: SearchRequest, plan: SearchPlan) -> Opening | None:
        """What every backend does before the search's snapshot: the scope check, the readiness check and
        the query embedding (a model call, made with no transaction held). None: nothing can match (the
        scope's sources are none), the empty result.

        Readiness is checked before the embedding only for a project whose index no search of this
        searcher has found ready yet for the scope's kind (an index still building must not cost a model
        call, nor an empty project load the model); after that, the search's own snapshot is the one check."""
        index = self.indexer.project(project)
        kind = SCOPE_KINDS[request.scope]
        self._check_scope(index, kind)
        if (project, kind) not in self._ready:
            with index.reader() as store:
                if self._refused(project, index, store, store.state(), kind, live=None):
                    return None
        use_bm25, use_vectors = self._lists(plan)
        query_vector = self._query_vector(index, request.query) if use_vectors else None
        return Opening(index, kind, use_bm25, query_vector)

    def _query_vector(self, index: ProjectIndex, query: str) -> np.ndarray:
        """The query's embedding; with ``common_word_share``, the mean of it and the embedding of the query
        without the index's common words (common_words.py), both embedded in one batch."""
        without = self.without_common_words(index, query)
        if without is None:
            return index.embedder.embed_query(query)
        whole, reduced = index.embedder.embed_queries([query, without])
        return half_weighted(whole, reduced)

    def without_common_words(self, index: ProjectIndex, query: str) -> str | None:
        """The query less the words held by ``common_word_share`` of the indexed chunks, or None (none is,
        the setting is 0, or the keyword index counts nothing). A short read of the term counts, which the
        keyword list then finds cached; below ``MIN_CHUNKS`` nothing is common."""
        share = self.settings.fusion.common_word_share
        if share <= 0:
            return None
        with index.reader() as store:
            if not store.counts_postings():
                return None
            terms = self.bm25.terms(store, query)
            if not terms:
                return None
            chunks, counts = self._chunks_and_counts(index, store, [word for word, _ in terms])
            never = self._stop_tokens(store)
        merged = {word for word, tokens in terms if never.intersection(tokens)}
        return without_words(query, common_words(counts, chunks, share, merged))

    def _stop_tokens(self, store: IndexReader) -> frozenset[str]:
        """The keyword index's tokens of the stopwords and calendar words (the same for every index of one
        tokenizer, so made once): a question word held as one of them is counted with them."""
        if self._stop_token_set is None:
            words = sorted(ENGLISH_STOPWORDS | CALENDAR_WORDS)
            self._stop_token_set = frozenset(token for _, tokens in store.keyword_terms(words) for token in tokens)
        return self._stop_token_set

    def _chunks_and_counts(
        self, index: ProjectIndex, store: IndexReader, words: list[str]
    ) -> tuple[int, dict[str, int]]:
        """How many chunks the index holds (the in-memory vectors' count; 0 while they cannot load) and, when
        a word can be common among so many, each of ``words``' chunk counts: the keyword list's (cached for
        it, at the snapshot's index version). A count that stopped at its bound is scaled to the whole index
        from the stretch it covered (the most recently indexed chunks); when that makes the word common, it
        is counted again from the first indexed chunk on and the smaller of the two estimates stands
        (common_words.py)."""
        vectors = index.vectors()
        chunks = vectors.live if vectors is not None else 0
        if vectors is None or chunks < COMMON_MIN_CHUNKS:
            return chunks, {}
        version = store.state().version
        bound = self.settings.bm25.max_postings
        needed = self.settings.fusion.common_word_share * chunks
        counts = self.bm25.counts(store, words, version)
        for word, count in counts.items():
            if count <= bound or not may_be_common(word):
                continue
            _, oldest = self.bm25.postings(store, word, version)
            counts[word] = estimated_count(count, vectors.live_within(low=oldest), chunks)
            if counts[word] >= needed:
                early, newest = self.bm25.postings_from_first(store, word, version)
                counts[word] = min(counts[word], estimated_count(early, vectors.live_within(high=newest), chunks))
        return chunks, counts

    def _refused(
        self,
        project: str,
        index: ProjectIndex,
        store: IndexReader,
        state: IndexState,
        kind: str | None,
        live: bool | None,
    ) -> bool:
        """Whether the search ends here with no hits: True when the scope has no sources at all. An index
        that is incompatible with the settings, uninitialised or (``live`` False) holds nothing of the
        scope while sources exist raises ``index_building``; ``live`` None: not known yet. A search that
        passes marks the project ready for its kind (see :meth:`_open`); an index that does not fit the
        settings is no longer ready for any kind, and one built with other settings is
        a settings mismatch (it stays so until an ``obsmem index`` adopts these settings)."""
        self._refuse_other_settings(project, index, state)
        if not state.compatible_with(index.signature, index.keyword_signature) or state.dimensions is None:
            compatible = False
        elif live is False:
            compatible = True
        else:
            if live:
                self._ready.add((project, kind))
            return False
        if compatible:
            self._ready.discard((project, kind))
        else:
            self._ready.difference_update({(project, scoped) for scoped in SCOPE_KINDS.values()})
        if store.source_count(kind) == 0:
            return True
        raise self._building(project, store, compatible=compatible, kind=kind)

    def _refuse_other_settings(self, project: str, index: ProjectIndex, state: IndexState) -> None:
        """An index built with other settings is not this process's to search (its vectors come from another
        model or chunking) nor to rebuild on its own (background indexing leaves it to ``obsmem index``), so
        the search says so instead of ``index_building``, which would promise an index that never comes."""
        if state.built_with_other_settings(index.signature, index.keyword_signature):
            self._ready.difference_update({(project, scoped) for scoped in SCOPE_KINDS.values()})
            raise index.settings_mismatch(state)

    @staticmethod
    def check_width(dimensions: int | None, query_vector: np.ndarray | None) -> None:
        """A query embedding of another size than the index's vectors (the endpoint serves another model under
        the same name) is ``embedding_unavailable``, as an indexing batch says: compared with them, it failed
        as a bare error of the vector maths or of the database (a 500)."""
        if query_vector is not None and dimensions is not None and query_vector.shape[-1] != dimensions:
            raise EmbeddingUnavailable(
                f"the embedding model returned {query_vector.shape[-1]}-dimensional vectors; the index holds "
                f"{dimensions}-dimensional ones"
            )

    def search(self, project: str, request: SearchRequest) -> SearchResult:
        return self.run(project, request, rankings=False)[0]

    def run(
        self, project: str, request: SearchRequest, plan: SearchPlan | None = None, *, rankings: bool = True
    ) -> tuple[SearchResult, StageRankings]:
        """The search as ``plan`` says, with each stage's ranking (see :class:`SearchPlan`).

        ``rankings=False`` leaves the candidate lists' and the fused stage's memory rankings empty (a
        plain search has no use for them, and each is a pass over a few hundred candidates); ``final``,
        ``rerank_scores`` and ``evidence`` are filled either way."""
        plan = plan or SearchPlan()
        stages = StageRankings()
        opening = self._open(project, request, plan)
        if opening is None:
            return SearchResult(mode="hybrid"), stages
        index, kind, use_bm25, query_vector = opening.index, opening.kind, opening.use_bm25, opening.query_vector
        vectors = index.vectors()
        # Candidates are always checked against the scope's kind (``scoped``); the lists may drop a kind
        # filter that keeps everything the in-memory vectors hold (``where``), which keeps them on the
        # graph and off the filtered keyword plan.
        scoped = Filter(request.window.lower, request.window.upper, request.session_id, kind)
        where = scoped if vectors is None else vectors.narrowed(scoped)
        fusion = self.settings.fusion
        k = fusion.candidates_per_list
        with index.reader() as store:
            state = store.state()
            if vectors is None:
                self._refuse_other_settings(project, index, state)
                raise self._building(project, store, compatible=False, kind=kind)
            if self._refused(project, index, store, state, kind, live=vectors.live_of(kind) > 0):
                return SearchResult(mode="hybrid"), stages
            self.check_width(state.dimensions, query_vector)
            partial = store.has_pending(kind)  # only what the scope searches makes its answer partial
            # Indexed chunks whose memory has changed since (capped): what the lists may lose to validation.
            margin = store.stale_chunks(MAX_STALE_MARGIN) if partial else 0
            slots = None if where.is_open else vectors.selection(where)
            label_range = None
            if slots is not None and state.version == vectors.version:
                # The in-memory vectors hold exactly this snapshot's chunks, so the window's labels are
                # known: the keyword list need only read that range of labels.
                if len(slots) == 0:
                    label_range = (1, 0)
                else:
                    window_labels = vectors.labels[slots]
                    label_range = (int(window_labels.min()), int(window_labels.max()))
            lists: list[RankedList] = []
            if use_bm25:
                lists.append(self.bm25.search(store, request.query, k + margin, where, label_range, vectors.live))
            if query_vector is not None:
                exact_max = self.settings.index.exact_scan_max_chunks
                lists.append(vector_list(vectors, query_vector, k + margin, where, exact_max, slots))
            valid = store.validate({label for ranked in lists for label in ranked.labels}, scoped)
            fused, stages.evidence, stages.unknown_names = self._rank_valid(
                store, request.query, lists, valid, vectors, query_vector, scoped, k, index.embedder, state.version
            )
        return self._finish(request, plan, lists, valid, fused, stages, partial=partial, rankings=rankings)

    def _finish(
        self,
        request: SearchRequest,
        plan: SearchPlan,
        lists: list[RankedList],
        valid: dict[int, Candidate],
        fused: Fused,
        stages: StageRankings,
        *,
        partial: bool,
        rankings: bool,
    ) -> tuple[SearchResult, StageRankings]:
        """After the snapshot: the relevance floor, the optional rerank, chunks collapsed to memories in order
        and the limit (shared by every backend's search)."""
        fusion = self.settings.fusion
        reranking = self.reranker is not None and plan.rerank
        nothing_close = False
        if not reranking and plan.floor and self._below_floor(stages.evidence):
            fused, nothing_close = [], True
        if rankings:
            for ranked in lists:
                setattr(stages, ranked.name, _memories(ranked.labels, valid))
        truncated = not nothing_close and (any(ranked.full for ranked in lists) or len(fused) > fusion.fused_candidates)
        candidates = [valid[label] for label, _ in fused[: fusion.fused_candidates]]
        if rankings:
            stages.fused = _memories([c.label for c in candidates], valid)
        scores: list[float] | None = None
        if self.reranker is not None and reranking and candidates:
            raw = self.reranker.score(request.query, [c.text for c in candidates])
            floor = self.reranker.settings.min_score if plan.floor else None
            order = rerank_order(raw, floor)
            candidates = [candidates[i] for i in order]
            scores = [raw[i] for i in order]
        chosen: list[Candidate] = []
        chosen_scores: list[float] = []
        seen: set[str] = set()
        for position, candidate in enumerate(candidates):
            if candidate.memory_id in seen:
                continue
            seen.add(candidate.memory_id)
            chosen.append(candidate)
            if scores is not None:
                chosen_scores.append(scores[position])
        if len(chosen) > request.limit:
            truncated = True
        stages.final = [candidate.memory_id for candidate in chosen]
        stages.rerank_scores = chosen_scores if scores is not None else None
        hits = [Hit.from_row(candidate.row) for candidate in chosen[: request.limit]]
        result = SearchResult("hybrid", hits, truncated=truncated, partial=partial, nothing_close=nothing_close)
        if nothing_close:
            result.unknown_names = stages.unknown_names
        return result, stages

    def supersedes(self, query: str) -> bool:
        """Whether supersession runs for ``query``. Session evidence then stays off: a question about the
        present asks for the latest of several decisions, usually in another session than the longest
        discussion of the thing, which session evidence would favour (docs/eval.md, "Session evidence")."""
        config = self.supersession
        return config.enabled and (not config.present_only or asks_about_now(query))

    def _superseded(
        self,
        query: str,
        fused: Fused,
        valid: dict[int, Candidate],
        vectors: VectorSet,
        store: IndexReader,
        *,
        present: bool,
    ) -> Fused:
        """``fused`` with the latest memory about a thing above the ones it replaced
        (``[semantic.supersession]``; retrieval/supersession.py, :func:`latest_first`): named replacements,
        then, for a question :meth:`supersedes` applies to (``present``), the rule for questions about the
        present. The first ``depth`` candidates' embeddings are read once, and only when a rule can move
        something."""
        config = self.supersession
        named = names_replacements(query, config)
        if len(fused) < 2 or not (present or named):
            return fused
        head = [label for label, _ in fused[: config.depth] if label in valid]
        texts = {label: valid[label].text for label in head}
        changes = {label: replaced_values(text) for label, text in texts.items()} if named else {}
        if not (present or any(changes.values())):
            return fused
        embeddings = vectors.vectors_of(head)
        missing = [label for label in head if label not in embeddings]
        if missing:  # committed after the in-memory vectors were refreshed: read them from this snapshot
            embeddings.update(store.embeddings(missing))
        return latest_first(
            query,
            fused,
            texts=texts,
            dates={label: str(valid[label].row[3] or "") for label in head},
            sessions={label: str(valid[label].row[2] or "") for label in head},
            embeddings=embeddings,
            changes=changes,
            config=config,
        )

    def _below_floor(self, best: float | None) -> bool:
        """Whether ``min_relevance`` turns this search away: candidates existed, none close enough."""
        floor = self.settings.min_relevance
        return floor is not None and best is not None and best < floor

    def _lists(self, plan: SearchPlan) -> tuple[bool, bool]:
        """Which lists to compute: the plan's, less any the settings weight at 0 (unless asked alone)."""
        if plan.lists != LISTS:
            return "bm25" in plan.lists, "vector" in plan.lists
        return self.weights.get("bm25", 1.0) > 0, self.weights.get("vector", 1.0) > 0

    def _rank_valid(
        self,
        store: IndexReader,
        query: str,
        lists: list[RankedList],
        valid: dict[int, Candidate],
        vectors: VectorSet,
        query_vector: np.ndarray | None,
        where: Filter,
        k: int,
        embedder: Embedder | None = None,
        version: int | None = None,
    ) -> tuple[Fused, float | None, list[str]]:
        """Each list cut to its first ``k`` valid candidates, then fused, smoothed and (for a hybrid of
        both lists) the question's identifiers (``named_first``) and supersession applied: what every
        backend does once its candidates are validated.
        Returns the order, the relevance ``min_relevance`` compares, and the question's names no chunk holds
        when the relevance counts them (then 0). ``embedder``: the query's, whose whole words that asks for;
        ``version``: the snapshot's index version, which the words' cached counts must describe."""
        for ranked in lists:
            kept = [item for item in ranked.items if item[0] in valid]
            ranked.full = ranked.full or len(kept) > k
            ranked.items = kept[:k]
        supersedes = self.supersedes(query)  # then no session evidence: a question about the present asks
        fused, evidence = self.rank(store, lists, valid, vectors, query_vector, where, by_session=not supersedes)
        unknown = []
        if evidence is not None and evidence > NO_EVIDENCE:
            unknown = self._unknown_names(store, query, embedder, version)
        if unknown:
            evidence = NO_EVIDENCE
        if len(lists) > 1 and self.settings.fusion.named_first:
            fused = named_first(query, fused, lambda label: valid[label].text)
        if len(lists) > 1:  # after: a later memory may revise one that names the thing
            fused = self._superseded(query, fused, valid, vectors, store, present=supersedes)
        return fused, evidence, unknown

    def _unknown_names(
        self, store: IndexReader, query: str, embedder: Embedder | None, version: int | None
    ) -> list[str]:
        """With ``relevance_measure`` ``...+names``: the names of the question no indexed chunk holds
        (retrieval/names.py). The counts are the keyword list's own (cached, bounded); an index whose
        tokenizer counts nothing (trigram) cannot tell, so nothing is unknown there."""
        if "names" not in self.settings.relevance_measure.split("+") or not store.counts_postings():
            return []
        names = question_names(query)
        if not names:
            return []
        counts = self.bm25.counts(store, [word for name in names for word in name.words], version)
        known_words = embedder.known_words() if embedder is not None else None
        return unknown_names(names, counts.__getitem__, known_words)

    def rank(
        self,
        store: IndexReader,
        lists: list[RankedList],
        valid: dict[int, Candidate],
        vectors: VectorSet,
        query_vector: np.ndarray | None,
        where: Filter,
        *,
        by_session: bool = True,
    ) -> tuple[Fused, float | None]:
        """The candidates' order (one list alone in its own order, or fused and smoothed) and what
        ``min_relevance`` compares (:func:`~obsmem.retrieval.fusion.relevance`: the fused evidence, or that
        plus how far the best cosine stands out, as ``relevance_measure`` says; None for one list).
        Session evidence (``session_weight``) applies unless ``by_session`` is False.

        Runs inside the read snapshot of the lists (stored embeddings and neighbours are read from it).
        Smoothing stops one past the ``fused_candidates`` budget (enough to tell whether it was reached);
        neighbours that enter that far are validated like the lists' candidates and added to ``valid``."""
        if len(lists) == 1:
            return list(lists[0].items), None
        cosines = None
        if self.exact_cosines and query_vector is not None:
            # Every candidate's exact cosine, BM25-only ones included (and the graph's rounding aside).
            wanted = list(dict.fromkeys(label for ranked in lists for label in ranked.labels))
            cosines = self._cosines(store, vectors, query_vector, wanted)
        fused = self.fuse(lists, self.weights, cosines)
        best = relevance(fused, lists, self.settings.relevance_measure, cosines)
        if self.session_weight > 0 and by_session:
            fused = session_pull(fused, {label: valid[label].row[2] for label, _ in fused}, self.session_weight)
        if self.neighbour_weight <= 0 or not fused:
            return fused, best
        neighbours = self._neighbours(store, [label for label, _ in fused], valid)
        smoothed = neighbour_smoothing(fused, neighbours, self.neighbour_weight)
        return self._admitted(store, smoothed, valid, where, self.settings.fusion.fused_candidates + 1), best

    @staticmethod
    def _cosines(store: IndexReader, vectors: VectorSet, query: np.ndarray, labels: list[int]) -> dict[int, float]:
        """Exact cosines of ``labels`` (unit vectors: inner products), from memory or the stored embeddings."""
        found = vectors.similarities(query, labels)
        missing = [label for label in labels if label not in found]
        if missing:  # committed after the in-memory vectors were refreshed: read them from this snapshot
            for label, vector in store.embeddings(missing):
                found[label] = float(vector @ query)
        return found

    @staticmethod
    def _neighbours(store: IndexReader, labels: list[int], valid: dict[int, Candidate]) -> dict[int, list[int]]:
        """For each of ``labels`` (all in ``valid``) and each chunk beside one, the chunks beside it (both
        ways): the memory's own previous and next chunk, and across memories the previous observation's
        last chunk and the next observation's first one.

        Where each candidate sits came with its validation; one statement reads where every chunk of the
        memories beside them (and of the candidates' own multi-chunk memories) sits, by index alone. Those
        chunks are not validated here: they can only enter the ranking, never lift a candidate, so
        :meth:`_admitted` validates the few that rank high enough (every check is per memory, so a
        memory's chunks pass or fail together and a neighbour that fails simply leaves)."""
        chosen = [valid[label] for label in labels]
        rows: set[int] = set()
        chunks: dict[int, list[tuple[int, int]]] = {}  # memory row -> (position, label) of every chunk
        for c in chosen:
            if c.previous_row is not None:
                rows.add(c.previous_row)
            if c.next_row is not None:
                rows.add(c.next_row)
            if c.chunk_count > 1:
                rows.add(c.memory_row)
            chunks.setdefault(c.memory_row, []).append((c.position, c.label))
        if rows:
            found: dict[int, list[tuple[int, int]]] = {}
            for memory_row, position, label in store.chunk_positions(rows):
                found.setdefault(memory_row, []).append((position, label))
            chunks.update(found)
        for memory_chunks in chunks.values():
            if len(memory_chunks) > 1:
                memory_chunks.sort()
        # Both ways; a pair linked from both of its ends appears twice, which smoothing (a maximum) ignores.
        beside: dict[int, list[int]] = {}
        near = beside.setdefault
        for c in chosen:
            own = chunks.get(c.memory_row, [])
            label, position, count = c.label, c.position, len(own)
            other = None
            if position > 0 and position - 1 < count:
                other = own[position - 1][1]
            elif position == 0 and c.previous_row is not None:
                previous = chunks.get(c.previous_row)
                if previous:
                    other = previous[-1][1]
            if other is not None:
                near(label, []).append(other)
                near(other, []).append(label)
            other = None
            if position + 1 < count:
                other = own[position + 1][1]
            elif position == count - 1 and c.next_row is not None:
                following = chunks.get(c.next_row)
                if following:
                    other = following[0][1]
            if other is not None:
                near(label, []).append(other)
                near(other, []).append(label)
        return beside

    @staticmethod
    def _admitted(store: IndexReader, ranked: Fused, valid: dict[int, Candidate], where: Filter, wanted: int) -> Fused:
        """The first ``wanted`` of ``ranked`` that pass validation: chunks not yet in ``valid`` (neighbours
        that entered) are validated a stretch at a time and added to it; those that fail leave and the
        ones below move up. Only what can reach the budget is ever checked."""
        admitted: Fused = []
        position = 0
        while position < len(ranked) and len(admitted) < wanted:
            stretch = ranked[position : position + wanted - len(admitted)]
            position += len(stretch)
            unchecked = {label for label, _ in stretch if label not in valid}
            if unchecked:
                valid.update(store.validate(unchecked, where))
            admitted.extend(item for item in stretch if item[0] in valid)
        return admitted
