"""How the keyword list bounds its work on large projects (``semantic.bm25.max_postings``).

Terms are kept rarest first while their chunks add up to the bound; counting stops at the bound + 1, and
when every term is past it the rarest is the one whose most recent chunks reach furthest back. An open
search whose kept term is past the bound scores only its ``max_postings`` most recent chunks, which must
rank exactly as the full ranking restricted to them; a filtered search still scores its whole window.
"""

from __future__ import annotations

import apsw

from obsmem.indexer.reader import SqliteIndexReader, rank_function
from obsmem.indexer.vectors import Filter
from obsmem.retrieval.bm25 import Bm25List
from obsmem.settings.semantic import Bm25Settings
from support.hybrid_reference import keyword_reader, scratch_keyword_table

TOKENIZER = "porter unicode61 remove_diacritics 2"
DATE = "2024-05-01 10:00:00"


def keyword_table(bodies: dict[int, str]) -> apsw.Connection:
    """An in-memory keyword table holding ``bodies`` by label (chunk rows too, for filtered searches)."""
    conn = scratch_keyword_table(TOKENIZER)
    with conn:
        for label, body in bodies.items():
            conn.execute(
                "INSERT INTO semantic_fts(rowid, body, previous, next, date) VALUES (?, ?, '', '', '1 May 2024')",
                (label, body),
            )
            conn.execute(
                "INSERT INTO semantic_chunks(id, memory_row, position, text, date, session_id)"
                " VALUES (?, ?, 0, ?, ?, 's1')",
                (label, label, body, DATE),
            )
    return conn


def reader(conn: apsw.Connection) -> SqliteIndexReader:
    return keyword_reader(conn, Bm25Settings(tokenizer=TOKENIZER))


def corpus() -> dict[int, str]:
    """alpha in labels 1-20 (old), gamma in 30-33, beta in 41-50 (recent); filler everywhere else."""
    bodies = {label: f"filler words number {label}" for label in range(1, 61)}
    for label in range(1, 21):
        bodies[label] = "alpha " * (1 + label % 3) + f"old note {label}"
    for label in range(30, 34):
        bodies[label] = f"gamma middle note {label}"
    for label in range(41, 51):
        bodies[label] = "beta " * (1 + label % 4) + f"recent note {label}"
    return bodies


def test_terms_are_kept_rarest_first_within_the_bound() -> None:
    store = reader(keyword_table(corpus()))
    keyword = Bm25List(Bm25Settings(max_postings=15))
    assert keyword.postings(store, "gamma") == (4, 30)
    assert keyword.postings(store, "alpha")[0] == 16  # counting stopped one past the bound
    # gamma (4) and beta (10) fit in 15; alpha does not. Kept terms stay in query order.
    assert keyword.match(store, "alpha beta gamma") == (["beta", "gamma"], False)


def test_past_the_bound_the_rarest_recent_term_is_scored_on_its_recent_chunks() -> None:
    store = reader(keyword_table(corpus()))
    keyword = Bm25List(Bm25Settings(max_postings=3))
    # Every term is in more than 3 chunks. Their 4 most recent chunks reach back to label 17 (alpha),
    # 30 (gamma) and 47 (beta): alpha is the rarest over the stretch that would be scored.
    assert keyword.match(store, "beta gamma alpha") == (["alpha"], True)
    found = keyword.search(store, "beta gamma alpha", 10)
    assert sorted(found.labels) == [18, 19, 20]  # the 3 most recent chunks holding alpha


def test_bounded_scoring_ranks_like_the_full_ranking_of_those_chunks() -> None:
    bodies = {label: ("delta " * (1 + label % 5)) + "word " * (label % 7) for label in range(1, 41)}
    conn = keyword_table(bodies)
    keyword = Bm25List(Bm25Settings(max_postings=12))
    full = [
        label
        for label, _ in conn.execute(
            "SELECT rowid, rank FROM semantic_fts WHERE semantic_fts MATCH '\"delta\"' AND rank MATCH ?"
            " ORDER BY rank, rowid",
            (rank_function(Bm25Settings().column_weights),),
        )
    ]
    recent = set(range(29, 41))
    found = keyword.search(reader(conn), "delta", 5)
    assert found.labels == [label for label in full if label in recent][:5]
    assert found.full
    # A filtered search scores every chunk of its window, old ones included.
    everything = keyword.search(reader(conn), "delta", 40, Filter(lower="2024-01-01 00:00:00"))
    assert everything.labels == full


def test_a_bounded_list_says_its_budget_was_reached() -> None:
    # Even when fewer chunks come back than were asked for, a bound that left matches unscored is a
    # reached budget (the search reports ``truncated``).
    store = reader(keyword_table({label: "delta note" for label in range(1, 41)}))
    keyword = Bm25List(Bm25Settings(max_postings=10))
    found = keyword.search(store, "delta", 20)
    assert len(found.labels) == 10 and found.full
    assert not Bm25List(Bm25Settings(max_postings=100)).search(store, "delta", 50).full
