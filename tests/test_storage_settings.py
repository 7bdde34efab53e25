"""`[storage]`: the backend choice and the PostgreSQL DSN, whose errors never repeat a password."""

from __future__ import annotations

from pathlib import Path

import pytest

from obsmem.errors import ConfigurationError
from obsmem.settings import load_settings

PASSWORD = "hunter2-very-secret-pw"


def test_sqlite_is_the_default_and_needs_no_dsn(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path)
    assert settings.storage.backend == "sqlite"
    assert settings.storage.dsn is None


def test_postgres_reads_the_dsn_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = f"postgresql://obsmem:{PASSWORD}@db.internal:5432/memory"
    monkeypatch.setenv("OBSMEM_STORAGE__BACKEND", "postgres")
    monkeypatch.setenv("OBSMEM_STORAGE__DSN", dsn)
    settings = load_settings(data_dir=tmp_path)
    assert settings.storage.backend == "postgres"
    assert settings.storage.postgres_dsn() == dsn
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings.model_dump())


def test_postgres_reads_a_unix_socket_dsn_from_the_settings_file(tmp_path: Path) -> None:
    config = tmp_path / "obsmem.toml"
    config.write_text('[storage]\nbackend = "postgres"\ndsn = "postgresql://obsmem@/memory?host=/run/postgresql"\n')
    settings = load_settings(config, data_dir=tmp_path)
    assert settings.storage.postgres_dsn().endswith("?host=/run/postgresql")


def test_postgres_without_a_dsn_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="backend 'postgres' needs dsn"):
        load_settings(data_dir=tmp_path, storage={"backend": "postgres"})


@pytest.mark.parametrize(
    ("dsn", "problem"),
    [
        (f"mysql://root:{PASSWORD}@db/memory", "must be a postgresql:// URL"),
        (f"postgresql://root:{PASSWORD}@/memory", "must name a host"),
        (f"postgresql://root:{PASSWORD}@db.internal:5432/", "must name a database"),
        (f"postgresql://root:{PASSWORD}@db.internal:port/memory", "not a valid postgresql:// URL"),
        (f"postgresql://root:{PASSWORD}@db/memory\n", "control characters"),
        ("   ", "is blank"),
    ],
)
def test_a_bad_dsn_is_described_without_its_password(tmp_path: Path, dsn: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": dsn})
    assert problem in caught.value.message
    assert "storage.dsn" in caught.value.message
    assert PASSWORD not in str(caught.value) and "root" not in caught.value.message


def test_an_unknown_backend_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="storage.backend"):
        load_settings(data_dir=tmp_path, storage={"backend": "mysql"})
