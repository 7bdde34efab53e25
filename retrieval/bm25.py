"""The keyword list: BM25 over the contextual keyword documents of the semantic index.

The query. User text never reaches the index's query syntax: the query becomes lowercased word tokens (letters and
digits), each with any possessive or contraction suffix dropped (``Caroline's`` -> ``caroline``,
``didn't`` -> ``didn``) and ordinals turned into numbers (``8th`` -> ``8``, so it matches the date
column's ``8 May 2023``); English function words are left out (all words are kept if nothing else is
left); the chunks matching any distinct term are ranked (OR) — an AND query finds nothing for most
natural-language questions. The index's tokenizer (Porter stemming by default) then treats a term exactly
as it treats document text.

The work. An OR query scores every match, so when the terms' document counts add up to more than
``max_postings`` the most common terms are dropped until they do not (the rarest always stays): this
bounds the work per query while dropping only the terms BM25 weighs least. On a very large project even
the rarest term may be in more chunks than that; an open search then scores only the ``max_postings``
most recently indexed chunks holding it (highest labels first; the vector list still ranks every
chunk). Which term is rarest is decided without reading whole posting lists: each term's chunks are
counted newest first up to ``max_postings`` + 1, and among terms past that bound the rarest is the one
whose ``max_postings`` + 1 most recent chunks reach furthest back — for an open search, the rarest over
the very stretch that is scored; for a filtered one (which scores its whole window) a cheap stand-in
for the rarest term over the whole table.

The ranking is BM25 over the body, previous, next and date columns with the configured column weights
(default 1.0, 0.5, 0.2, 2.0), higher is better. With a date or session filter the match is ranked inside
the filter (filter first, rank second), so a narrow window never loses its matches to a global top-k.

The ceiling. A BM25 score has no fixed scale, so fusion needs to know what this query could score: with FTS5's
constants (k1 = 1.2, b = 0.75) a term adds at most ``idf * (k1 + 1)`` however often a chunk repeats it, so
``(k1 + 1) * sum(idf of each query term)`` bounds every chunk's score (:func:`bm25_ceiling`). A chunk that
matches one common word of a five-word question scores a small share of it, where dividing by the best
match's score would give it full marks. A term the index holds nowhere still counts (its IDF is the
highest there is): the question asked for it and no memory has it. Each IDF is FTS5's own,
``log((N - n + 0.5) / (n + 0.5))`` (at least 1e-6) over the N indexed chunks, with n the term's posting
count as counted for the work bound (a count past ``max_postings`` stops there, so a very common term
alone in a query is taken as a little rarer than it is). The trigram tokenizer has no term counts: its
lists carry no ceiling and fusion falls back to the best match's score.

The index itself is asked through :class:`~obsmem.indexer.reader.IndexReader` (which words it can match,
posting counts, the top chunks for a set of terms): the FTS5 syntax, tokenizer and ``bm25()`` sign live
behind it, in the indexer.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from obsmem.indexer import Filter, IndexReader
from obsmem.retrieval.ranked import RankedList
from obsmem.settings import Bm25Settings

# Words that carry no topic in a question: function words, question words and auxiliaries of English,
# and the pieces contractions leave behind. Kept short on purpose: BM25's idf already down-weights common
# words; the list only removes terms that match nearly every document.
ENGLISH_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves
    s t ll ve re d m
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_SUFFIX = re.compile(r"['\u2019]")
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")

POSTINGS_CACHE_SECONDS = 300.0
# Marks a count from the first indexed chunk on in the postings cache (no term holds a NUL).
_FROM_FIRST = "\0first\0"
# Open searches' keyword lists kept per index snapshot (see Bm25List.search), least recently used first out.
LISTS_CACHED = 256
# FTS5's bm25() constants (fixed in SQLite's fts5_aux.c).
BM25_K1 = 1.2
MIN_IDF = 1e-6


def bm25_ceiling(postings: Iterable[int], chunks: int) -> float:
    """The most a chunk can score for terms with these posting counts among ``chunks`` indexed chunks."""
    total = 0.0
    for count in postings:
        idf = math.log((chunks - count + 0.5) / (count + 0.5)) if chunks > 0 else MIN_IDF
        total += max(idf, MIN_IDF)
    return (BM25_K1 + 1.0) * total


def query_words(text: str) -> list[str]:
    """Lowercased word tokens without possessive or contraction suffixes, ordinals as numbers."""
    return [word for _, _, word in query_word_spans(text)]


def query_word_spans(text: str) -> list[tuple[int, int, str]]:
    """Each word token of ``text``: where it starts and ends (its suffix included) and its query word."""
    found = []
    for match in _WORD.finditer(text):
        stem = _SUFFIX.split(match.group().lower(), maxsplit=1)[0]
        ordinal = _ORDINAL.fullmatch(stem)
        found.append((match.start(), match.end(), ordinal.group(1) if ordinal else stem))
    return found


def query_terms(text: str, stopwords: frozenset[str] = ENGLISH_STOPWORDS) -> list[str]:
    """Distinct terms in order of first use, stopwords removed (all words if nothing else is left)."""
    words = query_words(text)
    kept = [word for word in words if word not in stopwords]
    return list(dict.fromkeys(kept or words))


class Bm25List:
    def __init__(self, settings: Bm25Settings) -> None:
        self.settings = settings
        self._stopwords = ENGLISH_STOPWORDS if settings.stopwords == "english" else frozenset()
        self._postings: dict[tuple[str, str], tuple[float, int, int, int | None]] = {}
        # (store, index version, terms, k, recent) -> the list: only for open searches of a real index.
        self._lists: OrderedDict[tuple[object, ...], list[tuple[int, float]]] = OrderedDict()
        self._lists_lock = threading.Lock()

    def terms(self, store: IndexReader, query: str) -> list[tuple[str, list[str]]]:
        """``(term, the tokens the index holds it as)`` for each query term it can match."""
        return store.keyword_terms(query_terms(query, self._stopwords))

    def postings(self, store: IndexReader, term: str, version: int | None = None) -> tuple[int, int]:
        """``(chunks holding term, counted up to max_postings + 1; the oldest label counted)``.

        Counting newest first and stopping at the bound reads at most that many postings, where an exact
        count reads the term's whole list (tens of milliseconds for a common word at 1M chunks). Cached
        for a while: the figures decide which terms are kept and whether scoring is bounded, and a few
        minutes' drift in them moves those choices only at the margin. With the index ``version`` (a
        search passes it), a count made before the index last changed is made again: the counts also set
        the query's ceiling, which should describe the index being searched."""
        return self._counted(
            (store.source, term), version, lambda: store.term_postings(term, self.settings.max_postings)
        )

    def postings_from_first(self, store: IndexReader, term: str, version: int | None = None) -> tuple[int, int]:
        """``(chunks holding term, counted from the first indexed chunk on up to max_postings + 1; the newest
        label counted)``: the other end of the index from :meth:`postings`, cached the same way (common
        words ask for it, retrieval/common_words.py)."""
        key = (store.source, _FROM_FIRST + term)
        return self._counted(key, version, lambda: store.term_postings_oldest(term, self.settings.max_postings))

    def _counted(
        self, key: tuple[str, str], version: int | None, count: Callable[[], tuple[int, int]]
    ) -> tuple[int, int]:
        """The cached ``(count, label)`` of ``key`` if still fresh for ``version``, else ``count()``, cached."""
        now = time.monotonic()
        cached = self._cached(key, now, version)
        if cached is not None:
            return cached[1], cached[2]
        counted, label = count()
        if len(self._postings) > 100_000:
            self._postings.clear()
        self._postings[key] = (now, counted, label, version)
        return counted, label

    def counts(self, store: IndexReader, words: list[str], version: int | None = None) -> dict[str, int]:
        """Each word's chunk count as :meth:`postings` counts it (bounded, cached), asked in one request for
        the words not cached (one exchange with a database server)."""
        self._count_missing(store, list(dict.fromkeys(words)), version)
        return {word: self.postings(store, word, version)[0] for word in words}

    def _cached(
        self, key: tuple[str, str], now: float, version: int | None
    ) -> tuple[float, int, int, int | None] | None:
        """The cached count of ``key`` if still fresh for ``version``, else None. One lookup: another search
        may clear the cache at any moment."""
        cached = self._postings.get(key)
        fresh = cached is not None and now - cached[0] < POSTINGS_CACHE_SECONDS and version in (None, cached[3])
        return cached if fresh else None

    def _count_missing(self, store: IndexReader, terms: list[str], version: int | None) -> None:
        """Count every term whose count is not cached, in one request to the store (one exchange with a
        database server rather than one per term)."""
        now = time.monotonic()
        missing = [term for term in terms if self._cached((store.source, term), now, version) is None]
        if len(missing) < 2:
            return  # postings() counts a single term as well
        self.remember(store, missing, store.term_postings_many(missing, self.settings.max_postings), version)

    def remember(
        self, store: IndexReader, terms: list[str], postings: list[tuple[int, int]], version: int | None
    ) -> None:
        """Cache ``postings`` (each term's ``(count, oldest label)`` as :meth:`postings` counts it), read at
        the index ``version`` by a caller that asked for them together with other reads."""
        now = time.monotonic()
        if len(self._postings) > 100_000:
            self._postings.clear()
        for term, (count, oldest) in zip(terms, postings, strict=True):
            self._postings[(store.source, term)] = (now, count, oldest, version)

    def _bounded(
        self, store: IndexReader, terms: list[tuple[str, list[str]]], version: int | None = None
    ) -> tuple[list[str], bool]:
        """The terms kept (in query order) and whether their chunks exceed ``max_postings``."""
        if not terms or not store.counts_postings():
            return [term for term, _ in terms], False
        bound = self.settings.max_postings
        self._count_missing(store, [term for term, _ in terms], version)
        counted = []
        for position, (term, _) in enumerate(terms):
            count, oldest = self.postings(store, term, version)
            # Past the bound, the term whose most recent postings reach further back is the rarer one.
            counted.append((count, oldest if count > bound else 0, position, term))
        kept: list[tuple[int, str]] = []
        total = 0
        for docs, _, position, term in sorted(counted):
            if kept and total + docs > bound:
                break
            kept.append((position, term))
            total += docs
        return [term for _, term in sorted(kept)], total > bound

    def match(self, store: IndexReader, query: str, version: int | None = None) -> tuple[list[str], bool]:
        """The terms ``query`` is matched with (empty if none) and whether scoring must be bounded."""
        return self._bounded(store, self.terms(store, query), version)

    def search(
        self,
        store: IndexReader,
        query: str,
        k: int,
        where: Filter | None = None,
        label_range: tuple[int, int] | None = None,
        chunks: int | None = None,
    ) -> RankedList:
        """Top-k chunks, with the query's ceiling when ``chunks`` (how many are indexed) is given.

        With a filter, ``label_range`` may bound the chunk labels that can pass it (known
        from the in-memory vectors): the index then reads only that stretch of each posting list, which for
        a date window over memories written in date order is a small part of it. The filter itself is
        still applied exactly.

        An open search whose rarest term is in more than ``max_postings`` chunks scores the most recent
        ``max_postings`` of them (see the module's text); a filtered one scores every match inside its
        window."""
        # With ``chunks`` this is a search of a real index: its version keeps the cached counts current.
        version = store.state().version if chunks is not None else None
        terms, over = self.match(store, query, version)
        result = RankedList("bm25")
        if not terms or k <= 0:
            return result
        open_search = where is None or where.is_open
        recent = self.settings.max_postings if open_search and over else None
        if open_search and version is not None:
            items = self._open_list(store, version, terms, k + 1, recent)
        else:
            items = store.keyword_candidates(terms, k + 1, where, label_range=label_range, recent=recent)
        # A bounded search left matches unscored: its budget was reached whatever the count.
        result.full = len(items) > k or (open_search and over)
        result.items = items[:k]
        if chunks is not None and store.counts_postings():
            result.ceiling = bm25_ceiling((self.postings(store, term, version)[0] for term in terms), chunks)
        return result

    def _open_list(
        self, store: IndexReader, version: int, terms: list[str], k: int, recent: int | None
    ) -> list[tuple[int, float]]:
        """An open search's list, kept for later searches of the same index version.

        An open list depends only on the terms kept and the keyword tables, and the index version changes
        in the transaction that changes those tables, so a list kept for this version is the list this
        snapshot would compute. What it saves is large on a big project: a term past ``max_postings``
        makes FTS5's ``bm25()`` read its whole posting list for the IDF before scoring its most recent
        chunks, and the most common words are the ones that recur across questions. Bounded to the
        ``LISTS_CACHED`` most recently used lists."""
        key = (store.source, version, tuple(terms), k, recent)
        with self._lists_lock:
            items = self._lists.get(key)
            if items is not None:
                self._lists.move_to_end(key)
                return items
        items = store.keyword_candidates(terms, k, None, recent=recent)
        with self._lists_lock:
            self._lists[key] = items
            while len(self._lists) > LISTS_CACHED:
                self._lists.popitem(last=False)
        return items
