"""Processes with other [semantic] settings on one index: they refuse it, they never fight over it.

Several servers and workers share one project's semantic index (one PostgreSQL database, or one SQLite data
directory). A process whose settings (embedding model, chunking, keyword documents) differ from those the
index was built with used to reset it from its background indexer; the others, meeting an index of settings
not theirs, reset it back, so the index was rebuilt round after round and searches kept answering
``index_building``. Now only an explicit ``obsmem index PROJECT`` replaces an index built with other
settings; a background indexer leaves it alone, and the mismatched process's hybrid searches answer
``semantic_settings_mismatch`` (409) saying what to run. Keyword rows that differ only by the layout of an
older release are no settings change: a background indexer rebuilds them in its own layout after an
upgrade, while rows of a newer release's layout are left to that release. Every test runs on both
backends, with two real services on one database or data directory, their background indexers running
where the test says.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from obsmem.app import IndexReport, Obsmem
from obsmem.errors import IndexBusy, SemanticSettingsMismatch
from obsmem.indexer.state import NEWER_LAYOUT, OLDER_LAYOUT, SAME, SETTINGS, IndexState
from obsmem.surfaces.cli import cli
from obsmem.surfaces.http import create_app
from support.http_server import LOCAL
from support.model_server import ModelServer
from support.semantic_service import add_memories, corpus, service_on

BACKGROUND = {"index": {"background": True, "poll_seconds": 0.2}}
OTHER_CHUNKING = {"chunk_bytes": 400}
WAIT_SECONDS = 60.0
RESET_LOG = "index settings changed"
MISMATCH_LOG = "failed: semantic_settings_mismatch"
OLDER_LAYOUT_LOG = "keyword rows of an older release's layout"


@pytest.fixture
def dsn(request: pytest.FixtureRequest, backend: str) -> str | None:
    """A fresh PostgreSQL database, or None for SQLite (the services then share one data directory)."""
    return str(request.getfixturevalue("postgres_dsn")) if backend == "postgres" else None


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _index(service: Obsmem) -> IndexReport:
    """``obsmem index p`` through the library, run again while a background batch holds the project (a
    background indexer's attempt, refused or not, holds its indexing lock for a moment: ``index_busy``)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            return service.index("p")
        except IndexBusy:
            assert time.monotonic() < deadline, "the project's indexing lock was never free"
            time.sleep(0.05)


def _index_command(config: Path) -> Result:
    """``obsmem index p --json`` with ``config``, run again on ``index_busy`` as :func:`_index` is."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        result = CliRunner().invoke(cli, ["--config", str(config), "index", "p", "--json", "--no-progress"])
        if "error: index_busy:" not in result.output:
            return result
        assert time.monotonic() < deadline, "the project's indexing lock was never free"
        time.sleep(0.05)


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in record.getMessage() for record in caplog.records)


def _signature(service: Obsmem) -> tuple[str | None, str | None]:
    return service.database("p").query("SELECT signature, fts_tokenizer FROM semantic_state")[0]


def _own_signature(service: Obsmem) -> tuple[str, str]:
    index = service.indexer.project("p")  # type: ignore[union-attr]
    return index.signature, index.keyword_signature


def test_two_servers_with_other_settings_do_not_fight_over_the_index(
    tmp_path: Path, model_server: ModelServer, dsn: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="obsmem.indexer")
    memories = corpus(20)
    with service_on(tmp_path, model_server, dsn, **BACKGROUND) as first:
        ids = add_memories(first, "p", memories)
        _wait_until(lambda: first.status("p").indexed_count == 20, "the first server did not index the project")
        built = _signature(first)
        assert built == _own_signature(first)
        caplog.clear()  # the first build's own log
        with service_on(tmp_path, model_server, dsn, **OTHER_CHUNKING, **BACKGROUND) as second:
            # The second server's background indexer meets the project at its start.
            _wait_until(
                lambda: _logged(caplog, MISMATCH_LOG) + _logged(caplog, RESET_LOG) > 0,
                "the second server's background indexer never met the project",
            )
            assert _logged(caplog, RESET_LOG) == 0, "a background indexer reset an index built with other settings"
            assert _signature(first) == built
            found = first.search("p", memories[3][1])
            assert found.hits[0].memory_id == ids[3] and not found.partial
            with pytest.raises(SemanticSettingsMismatch):
                second.search("p", memories[3][1])
            assert second.search("p", memories[3][1][:12], mode="exact").hits  # exact search still works
            # A memory the mismatched server writes is indexed by the server whose settings the index has.
            later = add_memories(second, "p", [("2025-06-01 10:00", "zebra quagga okapi")], session="s9")
            _wait_until(lambda: first.status("p").indexed_count == 21, "the first server did not index the write")
            assert first.search("p", "zebra quagga okapi").hits[0].memory_id == later[0]
            assert _signature(first) == built and _logged(caplog, RESET_LOG) == 0


def test_two_servers_started_together_on_a_new_project_build_one_index(
    tmp_path: Path, model_server: ModelServer, dsn: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="obsmem.indexer")
    memories = corpus(20)
    with (
        service_on(tmp_path, model_server, dsn, **BACKGROUND) as first,
        service_on(tmp_path, model_server, dsn, **OTHER_CHUNKING, **BACKGROUND) as second,
    ):
        ids = add_memories(first, "p", memories)
        # Whichever indexer meets the new project first builds its index; the other leaves it alone.
        _wait_until(
            lambda: 20 in (first.status("p").indexed_count, second.status("p").indexed_count),
            "neither server indexed the new project",
        )
        owner, other = (first, second) if first.status("p").indexed_count == 20 else (second, first)
        assert _signature(owner) == _own_signature(owner)
        # A write through the other server wakes its indexer, which meets the index of the owner's settings.
        later = add_memories(other, "p", [("2025-06-01 10:00", "zebra quagga okapi")], session="s9")
        _wait_until(
            lambda: _logged(caplog, MISMATCH_LOG) > 0 or _logged(caplog, RESET_LOG) > 1,
            "the other server's indexer never met the project",
        )
        assert _logged(caplog, RESET_LOG) == 1  # the new index's one build, never a rebuild
        _wait_until(lambda: owner.status("p").indexed_count == 21, "the owner did not index the other's write")
        assert owner.search("p", memories[7][1]).hits[0].memory_id == ids[7]
        assert owner.search("p", "zebra quagga okapi").hits[0].memory_id == later[0]
        with pytest.raises(SemanticSettingsMismatch):
            other.search("p", "zebra quagga okapi")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (OTHER_CHUNKING, "chunk_bytes"),
        ({"embedding": {"model_id": "another-model"}}, "embedding"),
        ({"bm25": {"context_characters": 50}}, "bm25"),
    ],
)
def test_a_server_with_other_settings_answers_semantic_settings_mismatch(
    tmp_path: Path, model_server: ModelServer, dsn: str | None, change: dict[str, Any], named: str
) -> None:
    memories = corpus(12)
    with service_on(tmp_path, model_server, dsn) as first:
        add_memories(first, "p", memories)
        first.index("p")
        built = _signature(first)
    with service_on(tmp_path, model_server, dsn, **change) as second:
        embedded = len(model_server.texts_embedded())
        with TestClient(create_app(second), base_url=LOCAL) as client:
            answer = client.post("/v1/projects/p/search", json={"query": memories[2][1], "mode": "hybrid"})
            assert answer.status_code == 409, answer.text
            error = answer.json()["error"]
            assert error["code"] == "semantic_settings_mismatch"
            assert f"(they differ in: {named})" in error["message"] and "run `obsmem index p`" in error["message"]
            assert memories[2][1] not in answer.text and "another-model" not in answer.text
            exact = client.post("/v1/projects/p/search", json={"query": memories[2][1][:15], "mode": "exact"})
            assert exact.status_code == 200 and exact.json()["hits"]
            assert client.get("/v1/projects/p/status").json()["index"]["compatible"] is False
            documented = client.get("/openapi.json").json()["paths"]["/v1/projects/{project}/search"]["post"]
            assert "semantic_settings_mismatch" in documented["responses"]["409"]["description"]
        # What its background indexer runs: refused, nothing reset or embedded.
        with pytest.raises(SemanticSettingsMismatch):
            second.indexer.run_batch("p")  # type: ignore[union-attr]
        assert _signature(second) == built and len(model_server.texts_embedded()) == embedded
    with service_on(tmp_path, model_server, dsn) as first:
        assert first.search("p", memories[2][1]).hits  # the index is as it was built


def _config(path: Path, server: ModelServer, dsn: str | None, data_dir: Path) -> Path:
    """A settings file with the other chunking (what an operator switching the index runs with)."""
    storage = f'[storage]\nbackend = "postgres"\ndsn = "{dsn}"\n' if dsn is not None else ""
    path.write_text(
        f'data_dir = "{data_dir}"\n{storage}'
        f"[semantic]\nchunk_bytes = {OTHER_CHUNKING['chunk_bytes']}\n[semantic.embedding]\n"
        f'provider = "openai"\nbase_url = "{server.base_url}"\nmodel_id = "hashed-words"\n'
    )
    return path


def test_obsmem_index_switches_the_index_and_the_old_server_does_not_switch_it_back(
    tmp_path: Path, model_server: ModelServer, dsn: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="obsmem.indexer")
    memories = corpus(15)
    with service_on(tmp_path, model_server, dsn, **BACKGROUND) as old:
        ids = add_memories(old, "p", memories)
        _wait_until(lambda: old.status("p").indexed_count == 15, "the server did not index the project")
        assert old.search("p", memories[5][1]).hits[0].memory_id == ids[5]
        caplog.clear()  # the first build's own log
        config = _config(tmp_path / "new.toml", model_server, dsn, tmp_path)
        switched = _index_command(config)
        assert switched.exit_code == 0, switched.output
        summary = json.loads(switched.output)
        assert summary["reset"] and (summary["indexed_count"], summary["pending"]) == (15, 0)
        assert _logged(caplog, RESET_LOG) == 1  # the switch's own reset
        with service_on(tmp_path, model_server, dsn, **OTHER_CHUNKING) as new:
            adopted = _signature(new)
            assert adopted == _own_signature(new)
            assert new.search("p", memories[5][1]).hits[0].memory_id == ids[5]
            # The server still running with the old settings refuses the index; its background indexer meets
            # the memories queued again by the switch and leaves them to the settings the index now has.
            with pytest.raises(SemanticSettingsMismatch) as refused:
                old.search("p", memories[5][1])
            assert "(they differ in: chunk_bytes)" in refused.value.message
            later = add_memories(old, "p", [("2025-06-01 10:00", "zebra quagga okapi")], session="s9")
            _wait_until(lambda: _logged(caplog, MISMATCH_LOG) > 0, "the old server's indexer never met the project")
            assert _signature(new) == adopted and _logged(caplog, RESET_LOG) == 1
            _index(new)  # explicit, with the settings the index has: no reset
            assert new.status("p").indexed_count == 16
            assert new.search("p", "zebra quagga okapi").hits[0].memory_id == later[0]


def test_a_server_given_the_new_settings_first_serves_once_obsmem_index_has_switched(
    tmp_path: Path, model_server: ModelServer, dsn: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="obsmem.indexer")
    memories = corpus(15)
    with service_on(tmp_path, model_server, dsn) as before:
        ids = add_memories(before, "p", memories)
        _index(before)
    # The servers get the new settings first (the order docs/semantic.md allows): they refuse the index ...
    with service_on(tmp_path, model_server, dsn, **OTHER_CHUNKING, **BACKGROUND) as server:
        _wait_until(lambda: _logged(caplog, MISMATCH_LOG) > 0, "the background indexer never met the project")
        with pytest.raises(SemanticSettingsMismatch):
            server.search("p", memories[6][1])
        # ... until the operator switches it; then the running server searches it, and keeps it up to date.
        switched = _index_command(_config(tmp_path / "new.toml", model_server, dsn, tmp_path))
        assert switched.exit_code == 0, switched.output
        assert json.loads(switched.output)["reset"]
        assert server.search("p", memories[6][1]).hits[0].memory_id == ids[6]
        later = add_memories(server, "p", [("2025-06-01 10:00", "zebra quagga okapi")], session="s9")
        _wait_until(lambda: server.status("p").indexed_count == 16, "the background indexer missed the write")
        assert server.search("p", "zebra quagga okapi").hits[0].memory_id == later[0]


def test_one_server_restarted_with_other_settings_keeps_the_index_until_obsmem_index(
    tmp_path: Path, model_server: ModelServer, dsn: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="obsmem.indexer")
    memories = corpus(20)
    with service_on(tmp_path, model_server, dsn, **BACKGROUND) as service:
        ids = add_memories(service, "p", memories)
        _wait_until(lambda: service.status("p").indexed_count == 20, "the server did not index the project")
    caplog.clear()  # the first build's own log
    built_embeddings = len(model_server.texts_embedded())
    # Restarted with other settings (a mistake, or a change not yet adopted): the index stays as built.
    with service_on(tmp_path, model_server, dsn, **OTHER_CHUNKING, **BACKGROUND) as service:
        _wait_until(lambda: _logged(caplog, MISMATCH_LOG) > 0, "the background indexer never met the project")
        with pytest.raises(SemanticSettingsMismatch):
            service.search("p", memories[4][1])
        assert service.search("p", memories[4][1][:15], mode="exact").hits
    assert len(model_server.texts_embedded()) == built_embeddings and _logged(caplog, RESET_LOG) == 0
    # Back on the settings the index was built with: it answers at once, nothing embedded again.
    with service_on(tmp_path, model_server, dsn) as service:
        assert service.search("p", memories[4][1]).hits[0].memory_id == ids[4]
    # The change adopted: `obsmem index` (here its library call) rebuilds, and the background indexer of
    # the restarted server keeps the new index up to date from then on.
    with service_on(tmp_path, model_server, dsn, **OTHER_CHUNKING, **BACKGROUND) as service:
        report = _index(service)
        assert report.totals.reset and report.status.indexed_count == 20
        assert service.search("p", memories[4][1]).hits[0].memory_id == ids[4]
        later = add_memories(service, "p", [("2025-06-01 10:00", "zebra quagga okapi")], session="s9")
        _wait_until(lambda: service.status("p").indexed_count == 21, "the background indexer missed the write")
        assert service.search("p", "zebra quagga okapi").hits[0].memory_id == later[0]


def _store_layout(service: Obsmem, step: int) -> None:
    """Leave the index as a release ``step`` keyword layout versions away from this code's would have (-1:
    the release before, +1: a later one), its settings the same: its signature names that layout, and its
    neighbour contexts are not this layout's (here: none)."""
    parts = json.loads(_own_signature(service)[1])
    parts["layout"] = re.sub(r"\d+", lambda number: str(int(number.group()) + step), parts["layout"], count=1)
    with service.database("p").write() as conn:
        conn.execute("UPDATE semantic_state SET fts_tokenizer = ?", (json.dumps(parts, sort_keys=True),))
        conn.execute("DELETE FROM semantic_context")


def _contexts(service: Obsmem) -> int:
    return int(service.database("p").query("SELECT count(*) FROM semantic_context")[0][0])


def test_keyword_rows_of_an_older_release_are_rebuilt_by_the_background_indexer(
    tmp_path: Path, model_server: ModelServer, dsn: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgrade whose release bumps the keyword layout: every process answered semantic_settings_mismatch
    naming bm25, although no setting had changed, until someone ran `obsmem index`."""
    caplog.set_level(logging.INFO, logger="obsmem.indexer")
    memories = corpus(15)
    with service_on(tmp_path, model_server, dsn) as before:
        ids = add_memories(before, "p", memories)
        _index(before)
        built, contexts = _signature(before), _contexts(before)
        _store_layout(before, -1)
    embedded = len(model_server.texts_embedded())
    caplog.clear()
    with service_on(tmp_path, model_server, dsn, **BACKGROUND) as upgraded:
        _wait_until(lambda: _signature(upgraded) == built, "the background indexer left the older keyword rows")
        assert _contexts(upgraded) == contexts  # rebuilt in this layout, from the stored chunks
        assert len(model_server.texts_embedded()) == embedded  # keyword rows only: nothing embedded again
        assert upgraded.search("p", memories[4][1]).hits[0].memory_id == ids[4]
        assert upgraded.status("p").index.compatible
    assert _logged(caplog, OLDER_LAYOUT_LOG) == 1
    assert _logged(caplog, MISMATCH_LOG) == 0 and _logged(caplog, RESET_LOG) == 0


@pytest.mark.parametrize(
    ("step", "change", "named"),
    [
        (1, {}, None),  # a newer release's rows (a downgrade, or this process beside a newer one)
        (-1, OTHER_CHUNKING, "chunk_bytes"),  # an older layout does not hide a setting that changed
        (-1, {"bm25": {"context_characters": 50}}, "bm25"),
    ],
)
def test_keyword_rows_of_a_newer_release_or_of_other_settings_are_left_alone(
    tmp_path: Path,
    model_server: ModelServer,
    dsn: str | None,
    caplog: pytest.LogCaptureFixture,
    step: int,
    change: dict[str, Any],
    named: str | None,
) -> None:
    caplog.set_level(logging.INFO, logger="obsmem.indexer")
    memories = corpus(12)
    with service_on(tmp_path, model_server, dsn) as first:
        add_memories(first, "p", memories)
        _index(first)
        _store_layout(first, step)
        stored = _signature(first)
    caplog.clear()
    with service_on(tmp_path, model_server, dsn, **change, **BACKGROUND) as other:
        _wait_until(lambda: _logged(caplog, MISMATCH_LOG) > 0, "the background indexer never met the project")
        with TestClient(create_app(other), base_url=LOCAL) as client:
            answer = client.post("/v1/projects/p/search", json={"query": memories[2][1], "mode": "hybrid"})
        assert answer.status_code == 409, answer.text
        message = answer.json()["error"]["message"]
        assert answer.json()["error"]["code"] == "semantic_settings_mismatch"
        if named is None:
            assert "written by a newer obsmem release" in message and "Upgrade this process" in message
        else:
            assert f"(they differ in: {named})" in message
        assert _signature(other) == stored and _contexts(other) == 0  # nothing rebuilt
    assert _logged(caplog, OLDER_LAYOUT_LOG) == 0 and _logged(caplog, RESET_LOG) == 0


def test_keyword_layouts_compare_by_their_numbers_and_settings_apart() -> None:
    def signature(layout: str, context: int = 300) -> str:
        return json.dumps({"context_characters": context, "layout": layout, "tokenizer": "porter unicode61"})

    def difference(stored: str | None, wanted: str) -> str:
        return IndexState(None, None, stored, False, 0, None, None, None, None, None, 0).keyword_difference(wanted)

    ours = signature("contextual-2+postings-1")
    assert difference(ours, ours) == SAME
    assert difference(signature("contextual-1+postings-1"), ours) == OLDER_LAYOUT
    assert difference(signature("contextual-2+postings-0"), ours) == OLDER_LAYOUT
    assert difference(signature("contextual-3+postings-1"), ours) == NEWER_LAYOUT
    assert difference(signature("contextual-1+postings-2"), ours) == NEWER_LAYOUT  # not older in every part
    assert difference(signature("sentences-1+postings-1"), ours) == NEWER_LAYOUT  # a layout this code cannot place
    assert difference(signature("contextual-2"), ours) == NEWER_LAYOUT
    assert difference(signature("contextual-1+postings-1", 50), ours) == SETTINGS
    assert difference("porter unicode61", ours) == SETTINGS  # the plain tokenizer of the first releases
    assert difference(None, ours) == SETTINGS


def _version(service: Obsmem) -> int:
    return int(service.database("p").query("SELECT version FROM semantic_state")[0][0])


def test_processes_indexing_events_or_not_share_one_index_without_resets_or_churn(
    tmp_path: Path, model_server: ModelServer, dsn: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """``[semantic.index] events`` is no part of the signature: it decides whether an indexer marks and indexes
    the conversation events, not how anything is indexed. A process with it on indexes the events from
    their watermark (no reset); one with it off leaves their rows alone (its memory searches never see
    them) rather than drop them, so the two never undo each other's work on one index."""
    caplog.set_level(logging.INFO, logger="obsmem.indexer")
    memories = corpus(10)
    events_on = {"index": {**BACKGROUND["index"], "events": True}}
    with service_on(tmp_path, model_server, dsn, **BACKGROUND) as without:
        add_memories(without, "p", memories)  # and an event for each one to cite
        _wait_until(lambda: without.status("p").indexed_count == 10, "the server did not index the memories")
        built = _signature(without)
        with service_on(tmp_path, model_server, dsn, **events_on) as with_events:
            with_events.append_events("p", "s9", [{"role": "user", "content": "zebra quagga okapi"}])

            def indexed_by_both(events: int, memories: int) -> bool:
                status = with_events.status("p")
                pending = status.index.pending if status.index is not None else -1
                return (status.indexed_count, pending, without.status("p").indexed_count) == (
                    events + memories,
                    0,
                    memories,
                )

            _wait_until(lambda: indexed_by_both(11, 10), "the events were not indexed")
            assert _signature(with_events) == built  # added to the index as it was: nothing reset
            hit = with_events.search("p", "zebra quagga okapi", scope="conversation").hits[0]
            assert (hit.kind, hit.session_id, hit.seq) == ("event", "s9", 1)
            # A write through the process without events: its memory is indexed (by either process), its
            # event by the process with events, and neither process's rows are dropped by the other.
            later = add_memories(without, "p", [("2025-06-01 10:00", "walrus narwhal")], session="s8")
            _wait_until(lambda: indexed_by_both(12, 11), "the later memory or its event was not indexed")
            assert without.search("p", "walrus narwhal").hits[0].memory_id == later[0]
            assert all(hit.kind != "event" for hit in without.search("p", "zebra quagga okapi").hits)
            assert with_events.search("p", "zebra quagga okapi", scope="conversation").hits[0].seq == 1
            # Nothing churns: with both idle, no batch commits and nothing is embedded again.
            version, embedded = _version(without), len(model_server.texts_embedded())
            time.sleep(1.5)  # several polls of both background indexers
            assert _version(without) == version and len(model_server.texts_embedded()) == embedded
            assert _signature(without) == built
    assert _logged(caplog, MISMATCH_LOG) == 0 and _logged(caplog, RESET_LOG) == 1  # the first build only
