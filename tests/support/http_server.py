"""Shared pieces of the HTTP, tools and MCP tests: settings with keys, seeded projects, a live server."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from obsmem.app import Obsmem
from obsmem.settings import Settings, load_settings

KEY_ALPHA = "alpha-key-0123456789abcdef"
KEY_BETA = "beta-key-0123456789abcdef"
KEY_ALL = "admin-key-0123456789abcdef"
WRONG_KEY = "not-a-key-0123456789abcdef"
KEYS = [
    {"name": "alpha", "key": KEY_ALPHA, "projects": ["alpha"]},
    {"name": "beta", "key": KEY_BETA, "projects": ["beta", "gamma"]},
    {"name": "admin", "key": KEY_ALL, "projects": ["*"]},
]
LOCAL = "http://127.0.0.1"

# One line per observation; several hold characters that mean something to FTS5, LIKE or a shell.
ALPHA_NOTES = [
    ("2026-01-05 09:00", "high", "Fixed MapToolArguments null check in src/tools/map_args.py:142"),
    ("2026-01-05 09:30", "medium", "User asked to switch the planner to gpt-4 for c++ parsing"),
    ("2026-01-06 10:00", "low", "Documented the NEAR(a b) syntax and the AND / OR operators"),
    ("2026-01-06 11:15", "medium", 'Error text was: unexpected token "foo:bar" at line 3'),
    ("2026-01-07 14:00", "critical", "Disk at 100% during CI; snake_case names kept for backwards compat"),
    ("2026-01-08 08:45", "medium", "glob pattern src/*.py matched nothing; used src/**/*.py instead"),
    ("2026-02-01 00:00", "high", "Release 2.5.10 tagged after PR #2510 merged"),
    ("2026-02-01 23:59", "low", "Late note: mapToolArguments renamed in docs only"),
]
BETA_NOTES = [("2026-03-01 12:00", "high", "Beta secret: the payments key rotates on Fridays")]


def settings_for(
    tmp_path: Path, *, keys: list[dict[str, Any]] | None = None, storage: dict[str, Any] | None = None, **server: Any
) -> Settings:
    options: dict[str, Any] = {"storage": storage} if storage else {}
    settings = load_settings(data_dir=tmp_path / "data", api_keys=keys or [], **options)
    if server:
        settings = settings.model_copy(update={"server": settings.server.model_copy(update=server)})
    return settings


def seed(service: Obsmem, project: str, notes: list[tuple[str, str, str]], session: str = "s1") -> list[str]:
    """Events (one per note) and observations citing them; returns the full memory ids in note order."""
    service.append_events(project, session, [{"role": "user", "content": f"event for: {text}"} for _, _, text in notes])
    items = [
        {"session_id": session, "content": text, "timestamp": stamp, "importance": importance, "source_refs": [seq]}
        for seq, (stamp, importance, text) in enumerate(notes, start=1)
    ]
    receipt = service.add_observations(project, items)
    assert not receipt.rejected, receipt.rejected
    return [entry.memory_id for entry in sorted(receipt.added + receipt.duplicates, key=lambda e: e.index)]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def tree(path: Path) -> set[str]:
    """Every file and directory under ``path`` (relative), to prove a request created nothing.

    SQLite's own side files of an existing database are left out: the server's background workers open
    every project (creating its WAL and shared-memory files) whatever the requests do.
    """
    if not path.exists():
        return set()
    return {str(entry.relative_to(path)) for entry in path.rglob("*") if not entry.name.endswith(SQLITE_SIDE_FILES)}


def footprint(service: Obsmem) -> tuple[set[str], list[str]]:
    """What a request could have left behind on either backend: the data directory's files (SQLite's
    projects) and the projects the service lists (PostgreSQL keeps its projects in the database)."""
    return tree(service.settings.data_dir), service.project_names()


def storage_toml(storage: dict[str, Any]) -> str:
    """A ``[storage]`` section for a settings file from ``load_settings``'s ``storage`` keyword (empty: SQLite)."""
    if not storage:
        return ""
    return "[storage]\n" + "".join(f"{name} = {value!r}\n".replace("'", '"') for name, value in storage.items())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(path: Path, *, keys: list[dict[str, Any]], extra: str = "", **server: Any) -> Path:
    """A settings file with ``[server]`` options, API keys and ``extra`` TOML (other sections) at the end."""
    lines = ["[server]"]
    for name, value in server.items():
        lines.append(f"{name} = {value!r}" if not isinstance(value, bool) else f"{name} = {str(value).lower()}")
    for key in keys:
        projects = ", ".join(f'"{p}"' for p in key["projects"])
        lines += ["", "[[api_keys]]", f'name = "{key["name"]}"', f'key = "{key["key"]}"', f"projects = [{projects}]"]
    path.write_text("\n".join(lines) + "\n\n" + extra + "\n", encoding="utf-8")
    return path


@contextlib.contextmanager
def live_server(
    data_dir: Path,
    *,
    keys: list[dict[str, Any]] | None = None,
    timeout: float = 30.0,
    extra: str = "",
    port: int | None = None,
    **server: Any,
) -> Iterator[str]:
    """Run ``python -m obsmem.surfaces.http`` on a loopback port (``port``, else a free one); yields its base URL."""
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    config = write_config(data_dir.parent / f"server-{port}.toml", keys=keys or [], extra=extra, **server)
    command = [sys.executable, "-m", "obsmem.surfaces.http", "--config", str(config), "--data-dir", str(data_dir)]
    command += ["--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBSMEM_")}
    # The log goes to a file: a pipe nobody reads fills up and blocks the server mid-request.
    log_path = data_dir.parent / f"server-{port}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                output = log_path.read_text(encoding="utf-8", errors="replace")
                raise RuntimeError(f"server exited with {process.returncode}: {output}")
            try:
                if httpx.get(f"{base}/v1/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not answer /v1/health in time")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()


STORED_DEADLINE_SECONDS = 60.0


def wait_until_stored(base: str, last_seq: int, project: str = "p", session: str = "s1") -> None:
    """Poll the session's status until the server at ``base`` has stored its events up to ``last_seq`` (an
    append whose answer a test made its client lose is still being stored); fails past a bounded wait."""
    deadline = time.monotonic() + STORED_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        answer = httpx.get(f"{base}/v1/projects/{project}/sessions/{session}/status", timeout=30.0)
        if answer.status_code == 200 and answer.json()["last_seq"] >= last_seq:
            return
        time.sleep(0.05)
    raise AssertionError(f"the server never stored the session's events through seq {last_seq}")
