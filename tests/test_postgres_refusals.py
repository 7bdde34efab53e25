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


def test_every_unported_method_refuses_by_name(memory: Obsmem, tmp_path: Path) -> None:
    from obsmem.app.postgres import PORTED, REFUSED

    assert {"observe", "reflect", "save_note", "import_jsonl", "memory"} <= set(REFUSED)
    assert not set(REFUSED) & PORTED
    calls = {
        "observe": lambda: memory.observe("p", "s1"),
        "reflect": lambda: memory.reflect("p", "s1"),
        "memory": lambda: memory.memory("p", "s1"),
        "session_status": lambda: memory.session_status("p", "s1"),
        "import_jsonl": lambda: memory.import_jsonl("p", tmp_path / "x.jsonl"),
        "save_note": lambda: memory.save_note("p", "a note"),
    }
    for name, call in calls.items():
        with pytest.raises(NotOnPostgres) as caught:
            call()
        assert caught.value.code == "not_on_postgres" and caught.value.status == 501
        assert caught.value.message.startswith(f"{name} is not available on PostgreSQL yet")


def test_workers_are_refused_with_the_setting_that_serves_without_them(memory: Obsmem) -> None:
    with pytest.raises(NotOnPostgres, match=r"set \[jobs\] in_server = false"):
        memory.start_workers()
    memory.stop_workers()  # none run: nothing to stop


def test_the_sqlite_services_parts_are_refused_by_name(memory: Obsmem) -> None:
    with pytest.raises(NotOnPostgres, match="the pipeline part"):
        memory.pipeline  # noqa: B018


def test_trust_levels_and_hybrid_mode_are_refused(memory: Obsmem) -> None:
    with pytest.raises(NotOnPostgres) as caught:
        memory.search("p", "hello", trust="all")
    assert caught.value.field == "trust"
    with pytest.raises(Exception, match="hybrid mode needs the"):
        memory.search("p", "hello", mode="hybrid")


def test_settings_that_need_unported_work_are_refused_at_start(tmp_path: Path, postgres_dsn: str) -> None:
    storage = {"backend": "postgres", "dsn": postgres_dsn}
    with pytest.raises(NotOnPostgres, match=r"semantic\.index\.events"):
        Obsmem(load_settings(data_dir=tmp_path, storage=storage, semantic={"index": {"events": True}}))
    model = {"base_url": "http://127.0.0.1:9/v1", "model_id": "m"}
    with pytest.raises(NotOnPostgres, match=r"\[observer\] with a model"):
        Obsmem(load_settings(data_dir=tmp_path, storage=storage, model=model))
    quiet = Obsmem(
        load_settings(
            data_dir=tmp_path, storage=storage, model=model, observer={"enabled": False}, reflector={"enabled": False}
        )
    )
    try:
        assert quiet.status  # builds: nothing would run in the background
    finally:
        quiet.close()


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
