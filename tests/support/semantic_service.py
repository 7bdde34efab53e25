"""Services in semantic mode for the tests: settings that embed through the loopback model server (the
``model_server`` fixture of conftest.py) and memories added with their events."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from support.model_server import ModelServer


def semantic_settings(server: ModelServer, **overrides: Any) -> dict[str, Any]:
    """A [semantic] section using the loopback embedding server (fast, deterministic)."""
    section: dict[str, Any] = {
        "embedding": {
            "provider": "openai",
            "base_url": server.base_url,
            "model_id": "hashed-words",
            "timeout_seconds": 2.0,
            "batch_size": 16,
        },
        "index": {"background": False, "publish_min_changes": 1, "hnsw_ef_construction": 100},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(section.get(key), dict):
            section[key] = {**section[key], **value}
        else:
            section[key] = value
    return section


def make_service(data_dir: Path, server: ModelServer, **overrides: Any) -> Obsmem:
    return Obsmem(load_settings(data_dir=data_dir, semantic=semantic_settings(server, **overrides)))


def service_on(data_dir: Path, server: ModelServer, dsn: str | None, **overrides: Any) -> Obsmem:
    """``make_service`` on PostgreSQL at ``dsn``, or on SQLite when ``dsn`` is None."""
    options: dict[str, Any] = {"semantic": semantic_settings(server, **overrides)}
    if dsn is not None:
        options["storage"] = {"backend": "postgres", "dsn": dsn}
    return Obsmem(load_settings(data_dir=data_dir, **options))


@contextlib.contextmanager
def sqlite_and_postgres(
    data_dir: Path, server: ModelServer, dsn: str, **overrides: Any
) -> Iterator[tuple[Obsmem, Obsmem]]:
    """The same semantic settings on both backends, to hold PostgreSQL's answers to SQLite's."""
    with (
        service_on(data_dir / "sqlite", server, None, **overrides) as sqlite,
        service_on(data_dir / "pg", server, dsn, **overrides) as postgres,
    ):
        assert type(postgres).__name__ == "PostgresObsmem"
        yield sqlite, postgres


def add_memories(service: Obsmem, project: str, items: list[tuple[str, str]], session: str = "s1") -> list[str]:
    """Add observations ``(timestamp, content)``; returns their full memory ids in order."""
    receipt = service.append_events(project, session, [{"role": "user", "content": "e"} for _ in items])
    first = receipt.last_seq - len(items) + 1
    written = service.add_observations(
        project,
        [
            {"session_id": session, "content": content, "timestamp": stamp, "source_refs": [first + i]}
            for i, (stamp, content) in enumerate(items)
        ],
    )
    assert not written.rejected, written.rejected
    by_index = {entry.index: entry.memory_id for entry in written.added + written.duplicates}
    return [by_index[i] for i in range(len(items))]


# Words of a coding agent's memories: random draws of them share words the way real memories do.
VOCABULARY = [
    "auth",
    "login",
    "clock",
    "mock",
    "flaky",
    "test",
    "deploy",
    "arm64",
    "runner",
    "postgres",
    "index",
    "vacuum",
    "billing",
    "ledger",
    "rename",
    "cache",
    "redis",
    "timeout",
    "retry",
    "queue",
    "worker",
    "cron",
    "backup",
    "restore",
    "schema",
    "migration",
    "column",
    "tabs",
    "spaces",
    "linter",
    "format",
    "commit",
    "branch",
    "review",
    "merge",
    "release",
    "tag",
    "docker",
    "image",
    "build",
    "layer",
    "python",
    "rust",
    "golang",
]


def corpus(count: int, seed: int = 7) -> list[tuple[str, str]]:
    """``count`` memories ``(timestamp, content)`` of 3-9 words of :data:`VOCABULARY`, the same for a seed."""
    rng = random.Random(seed)
    items = []
    for i in range(count):
        words = rng.sample(VOCABULARY, rng.randint(3, 9))
        day = 1 + i % 28
        items.append((f"2024-{1 + (i // 28) % 12:02d}-{day:02d} {i % 24:02d}:{i % 60:02d}", " ".join(words) + f" m{i}"))
    return items
