"""The capability's tools answer a model's mistake in the same words embedded and remote (docs/pydantic-ai.md,
Tools): the remote backend checks ``memory_search``'s arguments with the embedded search's own code before it
posts them, so the HTTP API's schema never gets to word an error its own way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from obsmem.app import Obsmem
from obsmem.pydantic_ai import ObsmemClient
from obsmem.pydantic_ai.backends import EmbeddedMemory, RemoteMemory
from obsmem.settings import load_settings
from support.http_server import live_server

pytestmark = pytest.mark.timeout(120)

EVENT = {"role": "user", "content": "the login test fails with KeyError: user_id"}

MISTAKES: list[tuple[str, Any]] = [
    ("memory_search", {"query": "x", "limit": "5"}),
    ("memory_search", {"query": "x", "limit": 0}),
    ("memory_search", {"query": "x", "limit": 51}),
    ("memory_search", {"query": "x", "limit": True}),
    ("memory_search", {"query": "x", "limit": 2.0}),
    ("memory_search", {"query": 5}),
    ("memory_search", {"query": ""}),
    ("memory_search", {"query": "   "}),
    ("memory_search", {"query": "x" * 1001}),
    ("memory_search", {"query": "a\nb"}),
    ("memory_search", {"query": "x", "after": 20260101}),
    ("memory_search", {"query": "x", "after": "2026-02-30"}),
    ("memory_search", {"query": "x", "after": "2026-03-01", "before": "2026-02-01"}),
    ("memory_search", {"query": "x", "before": "yesterday"}),
    ("memory_search", {"query": "x", "scope": "everything"}),
    ("memory_search", {"query": "x", "scope": 3}),
    ("memory_search", {"query": "x", "trust": "some"}),
    ("memory_search", {"query": "x", "session_id": 5}),
    ("memory_search", {"query": "x", "session_id": "a/b"}),
    ("memory_search", {"query": "x", "mode": "exact"}),
    ("memory_search", {}),
    ("memory_search", "not json"),
    ("recall", {"id": "xyz"}),
    ("recall", {"id": "0123456789ab", "session_id": 5}),
    ("recall", {"id": "0123456789ab", "session_id": "s\ud800"}),  # not UTF-8: httpx raised out of the tool
    ("recall", {"id": "0123456789ab", "session_id": "s" * 70_000}),  # past httpx's URL limit: raised too
    ("recall", {"id": "0123456789ab", "session_id": "a/b"}),
    ("no_such_tool", {}),  # KeyError out of the remote backend's runner
    ("memory", {"action": "update", "content": "c"}),
]


def test_a_mistake_reads_the_same_embedded_and_remote(tmp_path: Path) -> None:
    with Obsmem(load_settings(data_dir=tmp_path / "embedded")) as embedded_service:
        embedded_service.append_events("p", "s1", [EVENT])
        embedded = EmbeddedMemory(embedded_service, "p", "s1")
        expected = [embedded.run_tool(name, arguments) for name, arguments in MISTAKES]
        # A well-formed search for comparison: both find the event.
        found = embedded.run_tool("memory_search", {"query": "KeyError", "scope": "conversation"})

    remote_data = tmp_path / "remote"
    with Obsmem(load_settings(data_dir=remote_data)) as remote_service:
        remote_service.append_events("p", "s1", [EVENT])
    with live_server(remote_data) as base:
        client = ObsmemClient(base)
        try:
            remote = RemoteMemory(client, "p", "s1")
            answers = [remote.run_tool(name, arguments) for name, arguments in MISTAKES]
            remote_found = remote.run_tool("memory_search", {"query": "KeyError", "scope": "conversation"})
        finally:
            client.close()

    for (name, arguments), want, got in zip(MISTAKES, expected, answers, strict=True):
        assert not want.startswith("{"), f"{name} {arguments!r} is not a mistake: {want}"
        assert got == want, f"{name} {arguments!r}"
    assert "KeyError: user_id" in found and "KeyError: user_id" in remote_found
