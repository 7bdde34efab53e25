"""Shared fixtures: real SQLite files in a temporary data directory, and real servers on 127.0.0.1.

``service`` is the one ``Obsmem`` fixture. A test module changes what it is built from by overriding
``service_options`` (for instance with :func:`support.pipeline_service.pipeline_options` over ``server``), and
what the scripted chat ``server`` answers by overriding ``script``. Helpers live in the ``support`` package.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from fastapi.testclient import TestClient  # noqa: E402

from obsmem.app import Obsmem  # noqa: E402
from obsmem.settings import load_settings  # noqa: E402
from obsmem.surfaces.http import create_app  # noqa: E402
from support.http_server import LOCAL  # noqa: E402
from support.model_server import ModelServer  # noqa: E402
from support.postgres import postgres_dsn, postgres_server  # noqa: E402, F401 (fixtures)
from support.scripted_chat import ObserverScript, Responder, ScriptedChatServer  # noqa: E402


@pytest.fixture(scope="session")
def _test_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache directory for the whole run: the local encoder is built there once (about 30 s), never in
    the developer's own cache."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, _test_cache_home: Path) -> None:
    """No test reads the developer's settings file, data directory or cache."""
    for name in list(os.environ):
        if name.startswith("OBSMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(_test_cache_home))


@pytest.fixture
def service_options() -> dict[str, Any]:
    """Settings for ``service`` beyond its data directory (``load_settings`` keywords); none by default."""
    return {}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend a test runs on: a test (or fixture) that asks for it runs once on each."""
    return str(request.param)


@pytest.fixture
def backend_storage(request: pytest.FixtureRequest, backend: str) -> dict[str, Any]:
    """``load_settings`` keywords selecting ``backend``: nothing for SQLite, a fresh database for PostgreSQL."""
    if backend == "postgres":
        return {"storage": {"backend": "postgres", "dsn": request.getfixturevalue("postgres_dsn")}}
    return {}


@pytest.fixture
def service(tmp_path: Path, service_options: dict[str, Any]) -> Iterator[Obsmem]:
    """An ``Obsmem`` over ``tmp_path/data``, closed after the test."""
    with Obsmem(load_settings(data_dir=tmp_path / "data", **service_options)) as memory:
        yield memory


@pytest.fixture
def client(service: Obsmem) -> Iterator[TestClient]:
    """The HTTP API of ``service``, in process."""
    with TestClient(create_app(service), base_url=LOCAL) as test_client:
        yield test_client


@pytest.fixture
def script() -> Responder:
    """What the scripted chat ``server`` answers: a well-behaved Observer unless a module says otherwise."""
    return ObserverScript()


@pytest.fixture
def server(script: Responder) -> Iterator[ScriptedChatServer]:
    """An OpenAI-compatible chat server on 127.0.0.1 playing ``script``."""
    with ScriptedChatServer(script) as running:
        yield running


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """OpenAI-compatible embedding and rerank endpoints on 127.0.0.1 (hashed bags of words)."""
    server = ModelServer()
    try:
        yield server
    finally:
        server.stop()
