"""How many exchanges with the server one hybrid search costs on PostgreSQL, counted in libpq's own trace.

Conversation events cost no more: the same exchanges serve every scope. An index of events alone drops the
scope's kind (the open search); an index of events and memories makes the kind a filter, whose exact scan of
the kind's vectors is an exchange of its own, as a date window's is.

An exchange is what the client sends until the server answers, so counting the turns from client messages
to server messages in the protocol trace of the service's one pooled connection counts round trips
exactly. A search on a busy server pays each one (a wake-up of both processes), so the count is held down
here. The hybrid search: the read of the question's words' counts with the chunk total (which finds its
common words, ``common_word_share``), one statement in a transaction of its own; then
the readiness row, the vector list's statement sent with the keyword list's term counts, the keyword
scores, the candidates' validation with their cosines and their neighbours' positions, the validation of
neighbours that entered the ranking (when any did) and the commit (six or seven). The
notes merged into the result (docs/trust.md): whether the caller's user tier exists, the project's notes
snapshot with its candidate check, the notes' keyword match and its commit (four).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from support.model_server import ModelServer
from support.semantic_service import VOCABULARY, add_memories, semantic_settings

# The hybrid search's six or seven and the notes' four (see above).
MAX_EXCHANGES = 11
# The hybrid search's alone: a conversation scope merges no notes.
MAX_SEARCH_EXCHANGES = 7


@pytest.fixture
def service(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> Iterator[Obsmem]:
    """A project indexed by one service, searched by another whose pool holds one connection (the one
    traced; indexing needs two)."""
    options: dict[str, Any] = {"semantic": semantic_settings(model_server)}
    with Obsmem(
        load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": postgres_dsn}, **options)
    ) as writer:
        rng = random.Random(5)
        for session in range(3):
            items = [
                (f"2025-{1 + i % 12:02d}-{1 + i % 28:02d} 10:{i % 60:02d}", " ".join(rng.choices(VOCABULARY, k=9)))
                for i in range(session, 150, 3)
            ]
            add_memories(writer, "p", items, session=f"s{session}")
        writer.index("p")
    storage = {"backend": "postgres", "dsn": postgres_dsn, "pool_size": 1}
    with Obsmem(load_settings(data_dir=tmp_path, storage=storage, **options)) as service:
        yield service


class Exchanges:
    """The pool's one connection traced by libpq while the block runs; ``count`` is its exchanges."""

    def __init__(self, service: Obsmem, path: Path) -> None:
        self.pool: Any = service.store._pool  # type: ignore[attr-defined]
        self.path = path
        self.count = 0

    def __enter__(self) -> Exchanges:
        self.file = open(self.path, "w")  # noqa: SIM115 (closed in __exit__)
        with self.pool.connection() as conn:
            conn.pgconn.trace(self.file.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        return self

    def __exit__(self, *exc: object) -> None:
        with self.pool.connection() as conn:
            conn.pgconn.untrace()
        self.file.close()
        # An exchange ends where the client waits for the server to be ready again: a simple query ("Query")
        # or the Sync that closes an extended query or a whole pipeline. Turns between client and server
        # messages would count a pipeline's early answers, read while it is still sending, as exchanges.
        messages = [line.split("\t") for line in self.path.read_text().splitlines() if line.startswith("F\t")]
        self.count = sum(1 for fields in messages if len(fields) > 2 and fields[2] in ("Query", "Sync"))


def _warm_up(service: Obsmem) -> None:
    """Searches until psycopg has prepared the statements every search repeats (preparing one costs an
    exchange of its own, once)."""
    for query in ("warm up the pool login", "warm", "up", "pool", "login", "the pool"):
        service.search("p", query, mode="hybrid")


def test_an_open_hybrid_search_is_a_few_exchanges(service: Obsmem, tmp_path: Path) -> None:
    _warm_up(service)
    for query in ("flaky login test", "mock the clock deploy", "cache rollback"):
        with Exchanges(service, tmp_path / "trace.txt") as first:
            result = service.search("p", query, mode="hybrid", limit=10)
        assert result.hits
        assert 5 <= first.count <= MAX_EXCHANGES, first.count
        # Asked again: the keyword list and the term counts are the searcher's (same index version).
        with Exchanges(service, tmp_path / "trace.txt") as again:
            repeated = service.search("p", query, mode="hybrid", limit=10)
        assert [hit.memory_id for hit in repeated.hits] == [hit.memory_id for hit in result.hits]
        assert again.count <= first.count


def test_finding_the_common_words_is_at_most_one_exchange(service: Obsmem, tmp_path: Path) -> None:
    """The same searches with ``common_word_share = 0`` (nothing read before the search's snapshot) cost at
    most one exchange less: the state, the chunk total and the counts go in one statement with no commit,
    and counts it reads (a question's new words) the search's keyword list no longer asks for itself."""
    semantic = service.settings.semantic
    fusion = semantic.fusion.model_copy(update={"common_word_share": 0.0})
    off_settings = service.settings.model_copy(update={"semantic": semantic.model_copy(update={"fusion": fusion})})
    with Obsmem(off_settings) as off:
        _warm_up(service)
        _warm_up(off)
        extra = []
        for query in ("flaky login test", "mock the clock deploy", "flaky login test"):
            with Exchanges(service, tmp_path / "trace.txt") as default:
                found = service.search("p", query, mode="hybrid", limit=10)
            with Exchanges(off, tmp_path / "trace.txt") as without:
                kept = off.search("p", query, mode="hybrid", limit=10)
            assert found.hits and kept.hits
            extra.append(default.count - without.count)
    # New words: the read takes the place of the keyword list's count; asked again, it is the one more.
    assert extra[0] == 0 and extra[-1] == 1, extra
    assert all(count in (0, 1) for count in extra), extra


def test_a_date_filtered_hybrid_search_is_a_few_exchanges(service: Obsmem, tmp_path: Path) -> None:
    _warm_up(service)
    with Exchanges(service, tmp_path / "trace.txt") as filtered:
        result = service.search("p", "login clock", mode="hybrid", after="2025-03-01", before="2025-05-31")
    assert result.hits and all("2025-03-01" <= hit.date[:10] <= "2025-05-31" for hit in result.hits)
    assert filtered.count <= MAX_EXCHANGES + 1, filtered.count  # the window's exact scan is its own exchange


def test_the_first_search_of_a_project_checks_readiness_before_embedding(service: Obsmem, tmp_path: Path) -> None:
    """An index nobody found ready yet is checked in a snapshot of its own before the model is asked
    (an empty project must not load a model), then searched in another."""
    fresh = Obsmem(service.settings)
    try:
        with Exchanges(fresh, tmp_path / "trace.txt") as first:
            assert fresh.search("p", "login clock", mode="hybrid").hits
        with Exchanges(fresh, tmp_path / "trace.txt") as second:
            assert fresh.search("p", "login mock", mode="hybrid").hits
    finally:
        fresh.close()
    assert first.count >= second.count + 2  # the check's snapshot: its statement and its commit


@pytest.fixture
def events_service(tmp_path: Path, model_server: ModelServer, postgres_dsn: str) -> Iterator[Obsmem]:
    """As :func:`service` with conversation events indexed: project ``c`` holds events alone, project ``b``
    events and memories."""
    options: dict[str, Any] = {"semantic": semantic_settings(model_server, index={"events": True})}
    with Obsmem(
        load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": postgres_dsn}, **options)
    ) as writer:
        rng = random.Random(7)
        for project in ("c", "b"):
            for session in range(3):
                writer.append_events(
                    project,
                    f"s{session}",
                    [{"role": "user", "content": " ".join(rng.choices(VOCABULARY, k=9))} for _ in range(50)],
                )
        add_memories(writer, "b", [("2025-01-03 10:00", "flaky login test fixed by mocking the clock")], session="m")
        writer.index("c")
        writer.index("b")
    storage = {"backend": "postgres", "dsn": postgres_dsn, "pool_size": 1}
    with Obsmem(load_settings(data_dir=tmp_path, storage=storage, **options)) as service:
        yield service


def test_a_hybrid_search_of_events_is_as_few_exchanges(events_service: Obsmem, tmp_path: Path) -> None:
    # Every scope of both projects, the memories last: a scope that finds nothing of its kind (memories in a
    # project of events alone) leaves the other scopes ready, their next search with no check of its own.
    for query in ("warm up the pool login", "warm", "up", "pool", "login", "the pool"):
        for project in ("c", "b"):
            for scope in ("conversation", "all", "memories"):
                events_service.search(project, query, mode="hybrid", scope=scope)
    for project, scope in (("c", "conversation"), ("c", "all"), ("b", "conversation"), ("b", "all"), ("b", "memories")):
        with Exchanges(events_service, tmp_path / "trace.txt") as traced:
            result = events_service.search(project, "flaky login test", mode="hybrid", scope=scope, limit=10)
        assert result.hits, (project, scope)
        bound = MAX_SEARCH_EXCHANGES if scope == "conversation" else MAX_EXCHANGES
        if project == "b" and scope != "all":
            bound += 1  # the kind is a filter: the window's exact scan is its own exchange, as a date window's
        assert 5 <= traced.count <= bound, (project, scope, traced.count)


def test_supersession_reads_the_head_embeddings_at_most_once(service: Obsmem, tmp_path: Path) -> None:
    """With supersession on, a question about the present reads the first candidates' embeddings in one more
    exchange (both of its steps share them); a question that is not, whose candidates name no replaced
    value, reads nothing more."""
    semantic = service.settings.semantic
    supersession = semantic.supersession.model_copy(update={"enabled": True})
    on_settings = service.settings.model_copy(
        update={"semantic": semantic.model_copy(update={"supersession": supersession})}
    )
    with Obsmem(on_settings) as on:
        _warm_up(service)
        _warm_up(on)
        for query, more in (("flaky login test now", 1), ("flaky login test", 0), ("cache rollback today", 1)):
            with Exchanges(service, tmp_path / "trace.txt") as off_count:
                assert service.search("p", query, mode="hybrid", limit=10).hits
            with Exchanges(on, tmp_path / "trace.txt") as on_count:
                assert on.search("p", query, mode="hybrid", limit=10).hits
            assert on_count.count - off_count.count == more, (query, on_count.count, off_count.count)
