"""A graph file that cannot be published on a full disk: the graph built in memory keeps serving and is
published again as it is (never rebuilt from every vector), the state stays dirty until a publish is whole,
a background indexer backs off between attempts, status says the graph is unsaved and why (so an operator
knows to free disk), and once space returns the index catches up by itself.

The disk is real: a small tmpfs mounted on the project's semantic directory and filled to the last block
(see support.storage_faults), so the database beside it keeps its room and only the graph file is short.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from rich.console import Console

from obsmem.app import Obsmem
from obsmem.errors import StorageFull
from obsmem.surfaces.cli_pipeline import projects_view
from obsmem.surfaces.http import create_app
from support.http_server import LOCAL
from support.hybrid_reference import reference_search
from support.model_server import ModelServer
from support.semantic_service import add_memories, corpus, make_service
from support.storage_faults import fill, small_tmpfs

QUERIES = ("flaky auth test", "docker image release", "backup restore")
ITEMS = corpus(160)
# The later graph is several times the first: removing the first file never makes room for it.
FIRST, LATER = ITEMS[:40], ITEMS[40:]


@pytest.fixture
def graph_disk(tmp_path: Path, model_server: ModelServer) -> Iterator[Path]:
    """A project ``p`` holding FIRST (not indexed yet) whose semantic directory is a 1 MiB file system."""
    data = tmp_path / "data"
    with make_service(data, model_server) as service:
        add_memories(service, "p", FIRST)
    with small_tmpfs(data / "projects" / "p" / "semantic", size="1m") as mount:
        yield mount


def fill_disk(mount: Path) -> Path:
    """Fill the graph's file system; the filler sits in a folder, where no cleanup of graph files looks."""
    (mount / "filler").mkdir(exist_ok=True)
    return fill(mount / "filler")


def graph_files(mount: Path) -> list[str]:
    return sorted(p.name for p in mount.iterdir() if p.is_file() and not p.name.startswith("."))


def wait_for(predicate: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def assert_search_serves(service: Obsmem) -> None:
    for query in QUERIES:
        with service.database("p").read() as conn:
            expected = reference_search(conn, service.settings.semantic, query)
        assert [h.memory_id for h in service.search("p", query).hits] == expected


def graph_file(service: Obsmem) -> tuple[str, str | None]:
    index = service.status("p").index
    assert index is not None
    return index.graph_file, index.graph_file_error


def status_text(service: Obsmem) -> str:
    """What ``obsmem status`` prints for the project."""
    console = Console(width=400, record=True)
    console.print(projects_view([service.status("p").to_dict()], [], None))
    return console.export_text()


def test_a_graph_publish_failed_on_a_full_disk_is_retried_without_rebuilding_the_graph(
    graph_disk: Path, tmp_path: Path, model_server: ModelServer
) -> None:
    """Each retry rebuilt the whole graph from every vector before failing to publish it again."""
    with make_service(tmp_path / "data", model_server) as service:
        service.index("p")
        index = service.indexer.project("p")
        graph = index.vectors().graph
        [published] = graph_files(graph_disk)
        assert graph is not None and index.state().hnsw_file == published
        filler = fill_disk(graph_disk)
        add_memories(service, "p", LATER)
        assert index.run_batch().remaining == 0  # the database has room: the batch is in, graph and all
        for _ in range(3):
            with pytest.raises(StorageFull):
                index.maintain()
            assert index.vectors().graph is graph  # published again as it is, not rebuilt
            state = index.state()
            assert state.dirty and set(graph_files(graph_disk)) <= {published}  # nothing short is left
            # Nothing is being rebuilt: the graph is current in memory, and its file could not be written.
            assert graph_file(service) == ("unsaved", "storage_full")
            assert_search_serves(service)  # the graph in memory serves meanwhile
        printed = status_text(service)
        assert "graph file unsaved" in printed and "could not be saved to its file (storage_full)" in printed
        assert "free disk space" in printed
        filler.unlink()
        index.maintain()
        state = index.state()
        assert not state.dirty and graph_files(graph_disk) == [state.hnsw_file]
        assert index.vectors().graph is graph
        assert graph_file(service) == ("present", None)
        assert "could not be saved" not in status_text(service)
    with make_service(tmp_path / "data", model_server) as service:  # the published file holds every vector
        vectors = service.indexer.project("p").vectors()
        assert vectors is not None and vectors.graph is not None
        assert vectors.graph.get_current_count() == len(ITEMS)
        assert_search_serves(service)


def test_the_background_indexer_backs_off_on_a_full_disk_and_catches_up_when_space_returns(
    graph_disk: Path, tmp_path: Path, model_server: ModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The scheduler forgot a failed publish as soon as the next batch succeeded: it retried every 2 s."""
    background = {"background": True, "poll_seconds": 0.2}
    with make_service(tmp_path / "data", model_server, index=background) as service:
        wait_for(lambda: service.status("p").index.graph_file == "present", "the first graph was not published")
        index = service.indexer.project("p")
        graph = index.vectors().graph
        filler = fill_disk(graph_disk)
        caplog.set_level(logging.WARNING, logger="obsmem.indexer")

        def delays() -> list[str]:
            found = (re.search(r"failed: storage_full \(retry in (\d+) s\)", r.getMessage()) for r in caplog.records)
            return [match.group(1) for match in found if match]

        add_memories(service, "p", LATER)  # wakes the indexer: the batch commits, the publish cannot
        wait_for(lambda: len(delays()) >= 3, "the publish was not retried")
        assert delays()[:3] == ["2", "4", "8"]  # each failure waits twice as long as the one before
        assert index.vectors().graph is graph  # and none of them rebuilt the graph
        assert index.state().dirty
        with TestClient(create_app(service), base_url=LOCAL) as client:  # what the status API says meanwhile
            answer = client.get("/v1/projects/p/status")
        assert answer.status_code == 200, answer.text
        reported = answer.json()["index"]
        assert (reported["graph_file"], reported["graph_file_error"]) == ("unsaved", "storage_full")
        filler.unlink()
        caught_up = "the index did not catch up once space returned"
        wait_for(lambda: graph_file(service) == ("present", None), caught_up)
        state = index.state()
        assert not state.dirty and graph_files(graph_disk) == [state.hnsw_file]
        assert index.vectors().graph is graph and graph.get_current_count() == len(ITEMS)
        assert_search_serves(service)
        messages = " ".join(record.getMessage() for record in caplog.records)
        assert not any(content in messages for _, content in ITEMS)  # never memory text
