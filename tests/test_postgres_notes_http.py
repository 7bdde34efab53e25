"""Notes, judgments and groom over HTTP and the ``memory`` agent tool on PostgreSQL: the same scenarios as
``tests/test_trust_http.py`` (imported from it and run here with services on a real PostgreSQL), with the
user tier following an API key's owner across its projects in its own schema.

No workers run on PostgreSQL yet, so the queued judge jobs are run here by claiming them from the project's
queue and calling the trust floor's handler, as a worker would.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_trust_http as scenarios
from fastapi.testclient import TestClient
from test_trust_http import (
    test_a_resolution_is_never_rewritten,
    test_a_user_tier_note_for_a_project_that_does_not_exist_is_not_found,
    test_note_and_judgment_listings_take_a_limit,
    test_note_routes_and_their_errors,
    test_the_memory_tool_saves_updates_and_forgets,
    test_the_user_tier_follows_the_keys_owner_and_no_one_else,
)

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.surfaces.http import create_app
from obsmem.trust import JUDGE_JOB
from obsmem.work import JobContext, JobQueue
from support.http_server import LOCAL

__all__ = [
    "test_a_resolution_is_never_rewritten",
    "test_a_user_tier_note_for_a_project_that_does_not_exist_is_not_found",
    "test_note_and_judgment_listings_take_a_limit",
    "test_note_routes_and_their_errors",
    "test_the_memory_tool_saves_updates_and_forgets",
    "test_the_user_tier_follows_the_keys_owner_and_no_one_else",
]


class JudgeJobs:
    """``service.worker_pool()`` for the scenarios: ``drain`` runs the project queues' judge jobs once each."""

    def __init__(self, service: Obsmem) -> None:
        self.service = service

    def drain(self, _: float) -> bool:
        for project in self.service.project_names():
            queue = JobQueue(self.service.database(project))  # type: ignore[arg-type]
            while (lease := queue.claim(socket.gethostname(), kinds=[JUDGE_JOB])) is not None:
                context = JobContext(project, self.service.database(project), queue, lease)  # type: ignore[arg-type]
                self.service.trust.handlers[JUDGE_JOB](context)
                assert queue.complete(lease)
        return True


def _postgres(settings: dict[str, Any], postgres_dsn: str, tmp_path: Path) -> Obsmem:
    storage = {"backend": "postgres", "dsn": postgres_dsn}
    jobs = {"in_server": False}  # the server starts no workers on PostgreSQL
    service = Obsmem(load_settings(data_dir=tmp_path / "data", storage=storage, jobs=jobs, **settings))
    service.worker_pool = lambda: JudgeJobs(service)  # type: ignore[method-assign]
    return service


@pytest.fixture
def keyed(tmp_path: Path, postgres_dsn: str) -> Iterator[tuple[Obsmem, TestClient]]:
    settings = {"api_keys": scenarios.KEYS, "trust": {"judge": {"provider": "human"}}}
    with (
        _postgres(settings, postgres_dsn, tmp_path) as service,
        TestClient(create_app(service), base_url=LOCAL) as client,
    ):
        for project in ("one", "two", "three"):
            service.append_events(project, "s1", [{"role": "user", "content": "hello"}])
        yield service, client


@pytest.fixture
def client(tmp_path: Path, postgres_dsn: str) -> Iterator[TestClient]:
    with _postgres({}, postgres_dsn, tmp_path) as service, TestClient(create_app(service), base_url=LOCAL) as client:
        yield client


@pytest.fixture(autouse=True)
def _tool_service_on_postgres(monkeypatch: pytest.MonkeyPatch, postgres_dsn: str) -> None:
    """The memory-tool scenario builds its own service from a data directory: make it a PostgreSQL one."""
    monkeypatch.setenv("OBSMEM_STORAGE__BACKEND", "postgres")
    monkeypatch.setenv("OBSMEM_STORAGE__DSN", postgres_dsn)


def test_the_services_here_are_on_postgres(keyed: tuple[Obsmem, TestClient]) -> None:
    assert type(keyed[0]).__name__ == "PostgresObsmem"
