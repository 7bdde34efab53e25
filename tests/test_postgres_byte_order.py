"""Listings on PostgreSQL come in byte order, as on SQLite, whatever the database's default collation.

A database created with a language's collation (here glibc's ``en_US.UTF-8``, which passes over
punctuation at first and so puts ``a0`` before ``a.b``) would otherwise list project names and user-tier
owners in another order than SQLite's data directory does. The locale is compiled for the test (``localedef``
from the system's locale sources) and given to a server of the test's own, since the shared test server
knows the C locales only.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from obsmem.app import Obsmem
from obsmem.settings import load_settings
from obsmem.storage import byte_order
from support.postgres import EXTENSIONS, PostgresTestServer

LOCALE = "en_US.UTF-8"
# Slugs whose byte order differs from en_US's: '-' < '.' < '0' < '_' < 'a' by bytes, while en_US passes
# over the punctuation first ("a0" < "a.b" < "ab" there).
NAMES = ("ab", "a_b", "a.b", "a-b", "a0", "b", "a")
_DATABASES = itertools.count(1)


@pytest.fixture(scope="module")
def language_server() -> Iterator[PostgresTestServer]:
    """A server of the module's own that can load ``en_US.UTF-8``, compiled for it."""
    localedef = shutil.which("localedef")
    if localedef is None:
        pytest.skip("localedef is needed to compile a language's locale for the server")
    locales = Path(tempfile.mkdtemp(prefix="obsmem-locales-"))
    try:
        compiled = subprocess.run(
            [localedef, "-i", "en_US", "-f", "UTF-8", str(locales / LOCALE)], capture_output=True, timeout=120
        )
        if not (locales / LOCALE / "LC_COLLATE").is_file():
            pytest.skip(f"the en_US locale could not be compiled here (localedef exit {compiled.returncode})")
        for directory, _, files in os.walk(locales):  # the server may run as an unprivileged user
            os.chmod(directory, 0o755)
            for name in files:
                os.chmod(os.path.join(directory, name), 0o644)
        server = PostgresTestServer(locales=locales)
        try:
            server.start()
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(locales, ignore_errors=True)


@pytest.fixture
def language_collated_dsn(language_server: PostgresTestServer) -> str:
    """A fresh database whose default collation is ``en_US.UTF-8``, holding the extensions."""
    name = f"obsmem_en_{next(_DATABASES)}"
    with psycopg.connect(language_server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LOCALE '{LOCALE}'")
    with psycopg.connect(language_server.dsn(name), autocommit=True) as conn:
        for extension in EXTENSIONS:
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
        # The premise: this database's default order is not the bytes' order.
        collated = [row[0] for row in conn.execute("SELECT unnest(%s::text[]) AS n ORDER BY n", (list(NAMES),))]
    assert collated != sorted(NAMES), collated
    return language_server.dsn(name)


def _service(tmp_path: Path, dsn: str) -> Obsmem:
    return Obsmem(load_settings(data_dir=tmp_path / "pg", storage={"backend": "postgres", "dsn": dsn}))


def test_projects_are_listed_in_byte_order_as_on_sqlite(tmp_path: Path, language_collated_dsn: str) -> None:
    with _service(tmp_path, language_collated_dsn) as service, Obsmem(load_settings(data_dir=tmp_path)) as local:
        for name in NAMES:
            for backend in (service, local):
                backend.append_events(name, "s1", [{"role": "user", "seq": 1, "content": "hello"}])
        assert service.project_names() == sorted(NAMES) == local.project_names()


def test_user_tiers_are_listed_in_byte_order_as_on_sqlite(tmp_path: Path, language_collated_dsn: str) -> None:
    with _service(tmp_path, language_collated_dsn) as service, Obsmem(load_settings(data_dir=tmp_path)) as local:
        for backend in (service, local):
            backend.append_events("work", "s1", [{"role": "user", "seq": 1, "content": "hello"}])
            for owner in NAMES:
                backend.save_note("work", "Run the formatter before committing.", tier="user", user=owner)
        assert service.user_tier_names() == sorted(NAMES) == local.user_tier_names()


def test_byte_order_is_a_collation_on_postgres_only(tmp_path: Path, language_collated_dsn: str) -> None:
    """The clause the shared SQL appends: SQLite sorts text by its bytes already (and knows no "C")."""
    with _service(tmp_path, language_collated_dsn) as service:
        service.append_events("ab", "s1", [{"role": "user", "seq": 1, "content": "hello"}])
        with service.store.get("ab").read() as conn:
            assert byte_order(conn) == ' COLLATE "C"'
            rows = conn.execute(f"SELECT n FROM unnest(?::text[]) AS t(n) ORDER BY n{byte_order(conn)}", (list(NAMES),))
            assert [row[0] for row in rows] == sorted(NAMES)
    with Obsmem(load_settings(data_dir=tmp_path)) as local:
        local.append_events("ab", "s1", [{"role": "user", "seq": 1, "content": "hello"}])
        with local.database("ab").read() as conn:
            assert byte_order(conn) == ""
