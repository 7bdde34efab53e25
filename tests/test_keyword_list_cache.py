"""Open keyword lists are kept per index version: reused while the version stands, recomputed after it moves.

The index version changes in the transaction that changes the keyword tables (a batch, a reset), so a
list kept for a version is exactly what a snapshot of that version computes; filtered searches and
lookups without the version (no ``chunks``) always ask the index.
"""

from __future__ import annotations

import apsw

from obsmem.indexer.vectors import Filter
from obsmem.retrieval import bm25 as bm25_module
from obsmem.retrieval.bm25 import Bm25List
from obsmem.settings.semantic import Bm25Settings
from support.hybrid_reference import keyword_reader, scratch_keyword_table

TOKENIZER = "porter unicode61 remove_diacritics 2"
STATE_COLUMNS = (
    "signature TEXT, dimensions INTEGER, dirty INTEGER DEFAULT 0, version INTEGER DEFAULT 1, hnsw_file TEXT,"
    " hnsw_bytes INTEGER, hnsw_checksum TEXT, hnsw_version INTEGER, hnsw_count INTEGER,"
    " removed_floor INTEGER DEFAULT 0"
)


def keyword_table(bodies: dict[int, str]) -> apsw.Connection:
    """A scratch keyword table with the whole state row (the version is what the cache keys on)."""
    conn = scratch_keyword_table(TOKENIZER)
    for column in STATE_COLUMNS.split(","):
        conn.execute(f"ALTER TABLE semantic_state ADD COLUMN {column.strip()}")
    for label, body in bodies.items():
        add(conn, label, body)
    return conn


def add(conn: apsw.Connection, label: int, body: str) -> None:
    conn.execute(
        "INSERT INTO semantic_fts(rowid, body, previous, next, date) VALUES (?, ?, '', '', '1 May 2024')",
        (label, body),
    )
    conn.execute(
        "INSERT INTO semantic_chunks(id, memory_row, position, text, date, session_id)"
        " VALUES (?, ?, 0, ?, '2024-05-01 10:00:00', 's1')",
        (label, label, body),
    )


def corpus() -> dict[int, str]:
    bodies = {label: f"filler words number {label}" for label in range(1, 41)}
    for label in range(1, 31):
        bodies[label] = "alpha " * (1 + label % 3) + f"note {label}"
    return bodies


def test_an_open_list_is_reused_within_a_version_and_recomputed_after() -> None:
    conn = keyword_table(corpus())
    store = keyword_reader(conn, Bm25Settings(tokenizer=TOKENIZER))
    keyword = Bm25List(Bm25Settings(max_postings=5))  # alpha is past the bound: its recent chunks are scored
    first = keyword.search(store, "alpha", 10, chunks=40)
    assert sorted(first.labels) == [26, 27, 28, 29, 30]
    # A chunk written without moving the version is invisible to the kept list: the list was reused...
    add(conn, 41, "alpha alpha alpha alpha new note")
    assert keyword.search(store, "alpha", 10, chunks=41).items == first.items
    # ...and once the version moves (as every batch that writes keyword rows does), it is computed again.
    conn.execute("UPDATE semantic_state SET version = version + 1")
    again = keyword.search(store, "alpha", 10, chunks=41)
    assert again.labels[0] == 41 and sorted(again.labels) == [27, 28, 29, 30, 41]
    # A kept list is still a bounded one: the search reports its budget reached.
    assert first.full and again.full


def test_filtered_lists_and_lookups_without_a_version_always_ask_the_index() -> None:
    conn = keyword_table(corpus())
    store = keyword_reader(conn, Bm25Settings(tokenizer=TOKENIZER))
    keyword = Bm25List(Bm25Settings(max_postings=100))
    window = Filter(lower="2024-01-01 00:00:00")
    assert 35 not in keyword.search(store, "alpha", 50, window, chunks=40).labels
    assert 35 not in keyword.search(store, "alpha", 50).labels
    add(conn, 41, "alpha new note")
    assert 41 in keyword.search(store, "alpha", 50, window, chunks=41).labels
    assert 41 in keyword.search(store, "alpha", 50).labels


def test_the_kept_lists_are_bounded(monkeypatch) -> None:
    monkeypatch.setattr(bm25_module, "LISTS_CACHED", 3)
    conn = keyword_table({label: f"word{label} filler" for label in range(1, 11)})
    store = keyword_reader(conn, Bm25Settings(tokenizer=TOKENIZER))
    keyword = Bm25List(Bm25Settings())
    for label in range(1, 11):
        assert keyword.search(store, f"word{label}", 5, chunks=10).labels == [label]
    assert len(keyword._lists) == 3
