"""Contextual keyword documents: their content, the query that searches them, and their upkeep.

A memory's keyword rows carry the end of the observation before it and the start of the one after it
in its session, so inserting, editing, moving or deleting a memory changes its neighbours' rows too.
These tests check that every such change leaves the rows equal to a from-scratch computation, that
neighbours are rewritten without calling the model, and that no user text can break the FTS5 query.
"""

from __future__ import annotations

import random
from pathlib import Path

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from obsmem.indexer.keywords import date_words, head, tail
from obsmem.indexer.reader import fts_match
from obsmem.retrieval.bm25 import Bm25List, query_terms, query_words
from obsmem.settings.semantic import Bm25Settings
from support.hybrid_reference import (
    IN_STEP,
    contexts_wrong,
    index_matches_memories,
    keyword_reader,
    reference_search,
    scratch_keyword_table,
)
from support.model_server import ModelServer
from support.semantic_service import add_memories, make_service

# -- pieces ------------------------------------------------------------------------------------------


def test_date_words_and_word_boundaries() -> None:
    assert date_words("2023-05-08 13:56:00") == "8 May 2023"
    assert date_words("2024-12-31 00:00:00") == "31 December 2024"
    assert tail("what position are you playing", 12) == "you playing"
    assert head("I'm a shooting guard for the team", 15) == "I'm a shooting"
    assert tail("short", 300) == "short" and head("short", 300) == "short"
    assert tail("unbrokenwordthatislong", 5) == "slong"  # no space: cut inside the word
    assert head("abc def", 0) == "" and tail("abc def", 0) == ""


def test_query_normalisation() -> None:
    assert query_words("Caroline's 8th LGBTQ-support group, didn't she?") == [
        "caroline",
        "8",
        "lgbtq",
        "support",
        "group",
        "didn",
        "she",
    ]
    assert query_terms("When did Melanie paint a sunrise?") == ["melanie", "paint", "sunrise"]
    assert query_terms("What is it?") == ["what", "is", "it"]  # nothing but stopwords: keep them all
    assert query_terms('gpt-4 c++ foo:bar NEAR(a b) "x" AND OR NOT *') == [
        "gpt",
        "4",
        "c",
        "foo",
        "bar",
        "near",
        "b",
        "x",
    ]
    assert query_terms("") == []


TOKENIZERS = ["porter unicode61 remove_diacritics 2", "unicode61", "trigram"]


@pytest.fixture(scope="module")
def tables() -> dict[str, apsw.Connection]:
    made = {}
    for tokenizer in TOKENIZERS:
        conn = scratch_keyword_table(tokenizer)
        conn.execute(
            "INSERT INTO semantic_fts(rowid, body, previous, next, date) VALUES"
            " (1, 'caroline went to the LGBTQ support group', 'when did you go', '', '8 May 2023'),"
            " (2, 'gpt-4 and c++ are fine', '', 'ok', '9 May 2023')"
        )
        made[tokenizer] = conn
    return made


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_no_user_text_is_fts5_syntax(tables: dict[str, apsw.Connection], text: str) -> None:
    for tokenizer, conn in tables.items():
        keyword = Bm25List(Bm25Settings(tokenizer=tokenizer))
        store = keyword_reader(conn, keyword.settings)
        terms, _ = keyword.match(store, text)
        if terms:
            # Every term is one quoted string: nothing the user typed is an operator, column or prefix.
            expression = fts_match(terms)
            assert all(part.startswith('"') and part.endswith('"') for part in expression.split(" OR "))
        keyword.search(store, text, 10)  # raises on any FTS5 syntax error


def test_natural_questions_still_match(tables: dict[str, apsw.Connection]) -> None:
    keyword = Bm25List(Bm25Settings())
    store = keyword_reader(tables[TOKENIZERS[0]], keyword.settings)
    assert keyword.search(store, "When did Caroline go to the LGBTQ support group?", 5).labels[0] == 1
    assert keyword.search(store, "what happened on the 8th of May?", 5).labels[0] == 1  # the date column
    assert keyword.search(store, "gpt-4 c++", 5).labels == [2]


# -- upkeep through the indexer ----------------------------------------------------------------------


def keyword_hits(service, column: str, word: str) -> list[str]:  # noqa: ANN001
    """Memory ids whose keyword rows hold ``word`` in ``column``."""
    rows = service.database("p").query(
        "SELECT DISTINCT s.memory_id FROM semantic_fts AS f JOIN semantic_chunks AS c ON c.id = f.rowid"
        " JOIN semantic_sources AS s ON s.memory_row = c.memory_row WHERE semantic_fts MATCH ?",
        (f'{column}:"{word}"',),
    )
    return sorted(row[0] for row in rows)


def check(service) -> None:  # noqa: ANN001
    db = service.database("p")
    with db.read() as conn:
        assert index_matches_memories(conn, service.settings.semantic) == IN_STEP
        for query in ("what position are you playing", "shooting guard", "apples on 3 March"):
            assert [h.memory_id for h in service.search("p", query).hits] == reference_search(
                conn, service.settings.semantic, query
            )


def test_insert_edit_move_delete_rewrite_only_neighbours_keyword_rows(
    tmp_path: Path, model_server: ModelServer
) -> None:
    with make_service(tmp_path, model_server) as service:
        first, second, third = add_memories(
            service,
            "p",
            [
                ("2024-03-01 10:00", "what position are you playing alpha"),
                ("2024-03-01 10:05", "I am a shooting guard beta"),
                ("2024-03-01 10:10", "we lost the game gamma"),
            ],
        )
        other = add_memories(service, "p", [("2024-03-01 10:07", "another session delta")], session="s2")[0]
        service.index("p")
        check(service)
        assert keyword_hits(service, "previous", "alpha") == [second]
        assert keyword_hits(service, "next", "beta") == [first]
        assert keyword_hits(service, "previous", "delta") == [] and keyword_hits(service, "next", "delta") == []
        assert keyword_hits(service, "date", "march") == sorted([first, second, third, other])

        # Insert between the first two: both rewritten, only the new memory embedded.
        embedded = len(model_server.texts_embedded())
        inserted = add_memories(service, "p", [("2024-03-01 10:02", "wait which team epsilon")])[0]
        report = service.indexer.run_batch("p")
        assert report.memories == 1 and report.chunks_embedded == 1 and report.neighbours_rewritten == 2
        assert len(model_server.texts_embedded()) == embedded + 1
        assert keyword_hits(service, "previous", "alpha") == [inserted]
        assert keyword_hits(service, "previous", "epsilon") == [second]
        assert keyword_hits(service, "next", "epsilon") == [first]
        check(service)

        # Edit the middle one's text: its neighbours' context follows.
        with service.database("p").write() as conn:
            conn.execute("UPDATE memories SET content = 'I am a point guard zeta' WHERE memory_id = ?", (second,))
        report = service.indexer.run_batch("p")
        assert report.chunks_embedded == 1 and report.neighbours_rewritten == 2
        assert keyword_hits(service, "previous", "zeta") == [third]
        assert keyword_hits(service, "previous", "beta") == []
        check(service)

        # Move the last one to the start of the session: old and new neighbours change.
        with service.database("p").write() as conn:
            conn.execute("UPDATE memories SET date = '2024-03-01 09:00:00' WHERE memory_id = ?", (third,))
        report = service.indexer.run_batch("p")
        assert report.chunks_embedded == 0 and report.chunks_reused == 1  # same text: its vector is kept
        assert keyword_hits(service, "next", "gamma") == []
        assert keyword_hits(service, "previous", "gamma") == [first]
        check(service)

        # Delete the inserted one: the first and the edited one are neighbours again.
        service.forget("p", inserted)
        report = service.indexer.run_batch("p")
        assert report.neighbours_rewritten == 2 and report.chunks_embedded == 0
        assert keyword_hits(service, "previous", "alpha") == [second]
        assert keyword_hits(service, "previous", "epsilon") == [] and keyword_hits(service, "next", "epsilon") == []
        check(service)


def test_reflections_carry_no_context_and_are_nobodys_neighbour(tmp_path: Path, model_server: ModelServer) -> None:
    with make_service(tmp_path, model_server) as service:
        first, second = add_memories(
            service, "p", [("2024-03-01 10:00", "question alpha"), ("2024-03-01 10:10", "answer beta")]
        )
        with service.database("p").write() as conn:
            conn.execute(
                "INSERT INTO memories(memory_id, kind, session_id, content, date, created_at)"
                " VALUES (?, 'reflection', 's1', 'summary gamma', '2024-03-01 10:05:00', '2024-03-01')",
                ("f" * 64,),
            )
        service.index("p")
        assert keyword_hits(service, "previous", "alpha") == [second]  # the reflection between is skipped
        assert keyword_hits(service, "previous", "gamma") == [] and keyword_hits(service, "next", "gamma") == []
        assert keyword_hits(service, "date", "march") == sorted([first, second, "f" * 64])
        check(service)

        # A reflection written later into the indexed session (as the Reflector does) is indexed alone:
        # no observation's rows change, and it is no neighbour for smoothing either.
        with service.database("p").write() as conn:
            conn.execute(
                "INSERT INTO memories(memory_id, kind, session_id, content, date, created_at)"
                " VALUES (?, 'reflection', 's1', 'summary delta', '2024-03-01 10:01:00', '2024-03-01')",
                ("e" * 64,),
            )
        report = service.indexer.run_batch("p")
        assert report.chunks_embedded == 1 and report.neighbours_rewritten == 0
        assert keyword_hits(service, "next", "beta") == [first]
        context = service.database("p").query(
            "SELECT x.previous_row, x.next_row FROM semantic_context AS x JOIN memories AS m ON m.id = x.memory_row"
            " WHERE m.kind = 'reflection'"
        )
        assert context == [(None, None), (None, None)]
        check(service)


def test_long_memory_first_chunk_gets_previous_last_chunk_gets_next(tmp_path: Path, model_server: ModelServer) -> None:
    long_text = " ".join(f"w{i}" for i in range(120))  # several chunks at 100 bytes
    with make_service(tmp_path, model_server, chunk_bytes=100, overlap_bytes=10) as service:
        add_memories(
            service,
            "p",
            [
                ("2024-03-01 10:00", "before alpha"),
                ("2024-03-01 10:05", long_text),
                ("2024-03-01 10:10", "after omega"),
            ],
        )
        service.index("p")
        db = service.database("p")
        rows = db.query(
            "SELECT c.position, (SELECT count(*) FROM semantic_fts WHERE semantic_fts MATCH 'previous:\"alpha\"'"
            " AND rowid = c.id), (SELECT count(*) FROM semantic_fts WHERE semantic_fts MATCH 'next:\"omega\"'"
            " AND rowid = c.id) FROM semantic_chunks AS c JOIN memories AS m ON m.id = c.memory_row"
            " WHERE m.content = ? ORDER BY c.position",
            (long_text,),
        )
        assert len(rows) >= 3
        assert [(has_previous, has_next) for _, has_previous, has_next in rows] == (
            [(1, 0)] + [(0, 0)] * (len(rows) - 2) + [(0, 1)]
        )
        check(service)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_changes_between_partial_batches_keep_every_context_right(
    tmp_path: Path,
    model_server: ModelServer,
    seed: int,
) -> None:
    """Inserts, edits, moves and deletes in three sessions, interleaved with batches of random sizes (so
    neighbours are often pending, or change again before their batch): once drained, every memory's
    keyword rows equal a from-scratch computation and search equals the brute-force reference."""
    rng = random.Random(seed)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
        "nu",
        "xi",
        "omicron",
        "pi",
        "rho",
        "sigma",
    ]

    def stamp() -> str:
        return f"2024-03-{rng.randint(1, 3):02d} 10:{rng.randint(0, 5):02d}"  # many same-minute memories

    with make_service(tmp_path, model_server) as service:
        add_memories(service, "p", [(stamp(), f"{word} start") for word in words[:6]])
        db = service.database("p")

        for round_number in range(25):
            for _ in range(rng.randint(0, 4)):
                text = " ".join(rng.sample(words, 3)) + f" r{round_number}"
                add_memories(service, "p", [(stamp(), text)], session=f"s{rng.randint(1, 3)}")
            rows = [row[0] for row in db.query("SELECT memory_id FROM memories")]
            action = rng.random()
            if rows and action < 0.25:
                service.forget("p", rng.choice(rows))
            elif rows and action < 0.5:
                with db.write() as conn:
                    conn.execute(
                        "UPDATE memories SET content = content || ' edited' WHERE memory_id = ?", (rng.choice(rows),)
                    )
            elif rows and action < 0.7:
                with db.write() as conn:
                    conn.execute(
                        "UPDATE memories SET date = ? WHERE memory_id = ?", (stamp() + ":00", rng.choice(rows))
                    )
            for _ in range(rng.randint(0, 2)):
                service.indexer.run_batch("p", max_chunks=rng.randint(1, 4))
            if round_number % 8 == 7:
                service.index("p")
                with db.read() as conn:
                    assert contexts_wrong(conn, service.settings.semantic) == []
        service.index("p")
        check(service)
