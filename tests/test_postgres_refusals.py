"""What the PostgreSQL backend does not do yet is refused with ``not_on_postgres``, naming it: never a
crash, never an answer from something else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from obsmem.app import Obsmem
from obsmem.errors import NotOnPostgres
from obsmem.settings import load_settings


@pytest.fixture
def memory(tmp_path: Path, postgres_dsn: str) -> Iterator[Obsmem]:
    settings = load_settings(data_dir=tmp_path, storage={"backend": "postgres", "dsn": postgres_dsn})
    with Obsmem(settings) as service:
        service.append_events("p", "s1", [{"role": "user", "content": "hello"}])
        yield service


def test_every_public_method_is_ported_and_a_new_one_would_refuse_by_name(memory: Obsmem) -> None:
    from obsmem.app.postgres import PORTED, REFUSED, _refusal

    public = {name for name, member in vars(Obsmem).items() if not name.startswith("_") and callable(member)}
    assert REFUSED == () and public <= PORTED  # a method added to Obsmem without porting it would be refused
    with pytest.raises(NotOnPostgres) as caught:
        _refusal("index")(memory)  # what an unported method is replaced with
    assert caught.value.code == "not_on_postgres" and caught.value.status == 501
    assert caught.value.message.startswith("index is not available on PostgreSQL yet")


def test_hybrid_mode_without_semantic_settings_is_refused_as_on_sqlite(memory: Obsmem) -> None:
    assert memory.search("p", "hello", trust="all").hits == []  # notes are on PostgreSQL (none match here)
    with pytest.raises(Exception, match="hybrid mode needs the"):
        memory.search("p", "hello", mode="hybrid")


def test_settings_that_need_unported_work_are_refused_at_start(tmp_path: Path, postgres_dsn: str) -> None:
    storage = {"backend": "postgres", "dsn": postgres_dsn}
    with pytest.raises(NotOnPostgres, match="trigram keyword tokenizer"):
        Obsmem(load_settings(data_dir=tmp_path, storage=storage, semantic={"bm25": {"tokenizer": "trigram"}}))
    model = {"base_url": "http://127.0.0.1:9/v1", "model_id": "m"}
    observed = Obsmem(load_settings(data_dir=tmp_path, storage=storage, model=model))
    try:
        observed.append_events("p", "s1", [{"role": "user", "content": "hello"}])
        assert observed.status("p").observer == "enabled"  # the pipeline runs on PostgreSQL
    finally:
        observed.close()


def test_text_holding_nul_is_refused_whole_not_altered(memory: Obsmem) -> None:
    batch = [{"role": "user", "content": "fine"}, {"role": "user", "content": "a\x00b"}]
    with pytest.raises(NotOnPostgres, match="NUL characters"):
        memory.append_events("p", "s1", batch)
    with pytest.raises(NotOnPostgres):
        memory.append_events("p", "s1", [{"role": "tool", "content": "x", "tool_name": "t\x00"}])
    assert memory.status("p").events == 1  # the fixture's event only


def test_the_environment_alone_chooses_postgres(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OBSMEM_STORAGE__BACKEND", "postgres")
    monkeypatch.setenv("OBSMEM_STORAGE__DSN", postgres_dsn)
    with Obsmem(data_dir=tmp_path) as service:
        assert type(service).__name__ == "PostgresObsmem"
        service.append_events("p", "s1", [{"role": "user", "content": "hello"}])
        assert service.project_names() == ["p"]
    assert not (tmp_path / "projects").exists()  # nothing written to the data directory
