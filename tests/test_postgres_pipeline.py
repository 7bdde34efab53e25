"""The observation pipeline on PostgreSQL, held to SQLite's answers: events in, observations, reflections and
drops by the scripted Observer, Reflector and Dropper on loopback, the projection and the views out.

The same script runs once on a SQLite data directory and once on a fresh PostgreSQL database, and what
each service answers (projection, session status, details, the event log's types, the jobs) must be the
same in shape and, where nothing depends on time, in value.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from obsmem.app import Obsmem
from obsmem.pipeline import project, rebuild_active_memory, render_projection
from obsmem.settings import load_settings
from support.pipeline_service import SMALL_REFLECTION, pipeline_options, user, words
from support.scripted_chat import DropperScript, ObserverScript, PipelineScript, ReflectorScript, ScriptedChatServer


@pytest.fixture
def script() -> PipelineScript:
    return PipelineScript(ObserverScript(), ReflectorScript(), DropperScript())


def service_on(backend: str, tmp_path: Path, server: ScriptedChatServer, dsn: str | None) -> Obsmem:
    options = pipeline_options(server, **SMALL_REFLECTION)
    if backend == "postgres":
        options["storage"] = {"backend": "postgres", "dsn": dsn}
    return Obsmem(load_settings(data_dir=tmp_path / backend, **options))


@pytest.fixture
def postgres(tmp_path: Path, server: ScriptedChatServer, postgres_dsn: str) -> Iterator[Obsmem]:
    with service_on("postgres", tmp_path, server, postgres_dsn) as service:
        assert type(service).__name__ == "PostgresObsmem"
        yield service


def fill(service: Obsmem, session: str = "s1", n: int = 20) -> None:
    service.append_events("p", session, [user(f"message {i}: " + words(30)) for i in range(n)])


def drain(service: Obsmem) -> None:
    assert service.worker_pool().drain(60)


def run_script(service: Obsmem) -> dict[str, Any]:
    """Append, drain the workers, and collect every answer that should not depend on the backend."""
    fill(service)
    fill(service, "quiet", n=3)  # under the reflection threshold
    drain(service)
    answers: dict[str, Any] = {}
    for session in ("s1", "quiet"):
        status = service.session_status("p", session).to_dict()
        answers[f"status {session}"] = without_times(status)
        answers[f"memory {session}"] = service.memory("p", session).to_dict()
        answers[f"details {session}"] = without_times(service.memory_details("p", session).to_dict())
    events = service.pipeline_events("p", limit=1000)
    answers["event types"] = sorted(event.type for event in events)
    answers["jobs"] = sorted(
        (job["kind"], job["state"], job["attempts"]) for job in service.jobs("p").to_dict()["jobs"]
    )
    project_status = service.status("p").to_dict()
    answers["project"] = {
        key: project_status[key]
        for key in ("sessions", "events", "observations", "reflections", "generations", "dropped_observations")
    } | {"observer": project_status["observer"], "reflector": project_status["reflector"]}
    answers["models"] = service.models("p").to_dict()
    return answers


_TIMES = {
    "at",
    "created_at",
    "finished_at",
    "promoted_at",
    "last_observed_at",
    "started_at",
    "updated_at",
    "covered_at",
}


def without_times(value: Any) -> Any:
    """``value`` with wall-clock stamps and durations blanked (they differ between any two runs)."""
    if isinstance(value, dict):
        return {
            key: "<time>" if (key in _TIMES or key.endswith("_ms") or key.endswith("_seconds")) else without_times(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [without_times(item) for item in value]
    return value


def test_events_to_observations_reflections_and_projection_match_sqlite(
    tmp_path: Path, server: ScriptedChatServer, postgres_dsn: str
) -> None:
    answers = {}
    for backend in ("sqlite", "postgres"):
        # A fresh script for each: the Observer's texts count its calls, and memory ids hash the texts.
        server.responder = PipelineScript(ObserverScript(), ReflectorScript(), DropperScript())
        with service_on(backend, tmp_path, server, postgres_dsn) as service:
            answers[backend] = run_script(service)
    sqlite, postgres = answers["sqlite"], answers["postgres"]
    assert postgres["project"]["generations"] == 1 and postgres["project"]["reflections"] == 4
    assert postgres["project"]["dropped_observations"] > 0 and postgres["project"]["observer"] == "enabled"
    assert "om_reflection_end" in postgres["event types"] and "om_observation_end" in postgres["event types"]
    assert {state for _, state, _ in postgres["jobs"]} == {"done"}
    assert postgres["memory s1"]["reflections"] == 4 and postgres["memory s1"]["generation"] == 1
    for key in sqlite:
        assert postgres[key] == sqlite[key], key


def test_the_projection_is_the_ledger_and_dropped_observations_stay_searchable(postgres: Obsmem) -> None:
    fill(postgres)
    drain(postgres)
    db = postgres.store.get("p")
    with db.read() as conn:
        number, items = rebuild_active_memory(conn, "s1")  # type: ignore[arg-type]
        assert project(conn, "s1").text == render_projection("s1", items, number).text  # type: ignore[arg-type]
    dropped = db.query(
        "SELECT m.memory_id, m.content FROM dropped_observations AS d JOIN memories AS m ON m.id = d.observation_row"
    )
    assert dropped
    projection = postgres.memory("p", "s1")
    for memory_id, content in dropped:
        assert f"[{memory_id[:12]}]" not in projection.text
        assert [hit.id for hit in postgres.search("p", content, session_id="s1").hits] == [memory_id[:12]]
        assert postgres.recall("p", memory_id[:12]).sources


def test_the_ledger_refuses_to_be_rewritten(postgres: Obsmem) -> None:
    """The invariants SQLite's triggers hold, held by PostgreSQL's: coverage and generation records are never
    changed, a finished generation never written again, the pointer never moved back or deleted."""
    fill(postgres)
    drain(postgres)
    db = postgres.store.get("p")
    refused = [
        "UPDATE coverage SET cycle_id = 'x'",
        "UPDATE observer_progress SET observed_through_seq = 0",
        "UPDATE generations SET claims = claims + 1",
        "DELETE FROM generations",
        "DELETE FROM active_generation",
        "UPDATE active_generation SET number = number + 1",
        "UPDATE dropped_observations SET rank = rank + 1",
        "DELETE FROM dropped_observations",
        "DELETE FROM generation_reflections",
    ]
    for statement in refused:
        with pytest.raises(psycopg.errors.CheckViolation), db.write() as conn:
            conn.execute(statement)
    # Forgetting a memory takes its records with it (the cascade the triggers allow).
    reflection = db.query("SELECT memory_id FROM memories WHERE kind = 'reflection' ORDER BY id LIMIT 1")[0][0]
    dropped = db.query(
        "SELECT m.memory_id FROM dropped_observations AS d JOIN memories AS m ON m.id = d.observation_row"
    )
    postgres.forget("p", reflection)
    postgres.forget("p", dropped[0][0])
    assert db.query("SELECT count(*) FROM generation_reflections") == [(3,)]
    assert db.query("SELECT count(*) FROM dropped_observations") == [(len(dropped) - 1,)]


def test_models_switch_and_requests_queue_on_postgres(postgres: Obsmem, script: PipelineScript) -> None:
    fill(postgres, n=1)  # below the buffer: nothing queued by the append
    assert postgres.jobs("p").to_dict()["counts"]["queued"] == 0
    switched = postgres.switch_models("p", {"observer": {"model_id": "other-observer"}}).to_dict()
    assert switched["changed"] and switched["models"]["observer"]["model_id"] == "other-observer"
    before = postgres.memory_version("p", "s1")
    assert postgres.observe("p", "s1").created
    drain(postgres)
    assert postgres.memory_version("p", "s1") != before  # the observation changed the projection
    assert postgres.memory("p", "s1").to_dict()["untrusted_notes"] == []
    assert ("record_observations", "other-observer") in script.models
    assert postgres.session_status("p", "s1").to_dict()["observed_through_seq"] == 1
    assert postgres.switch_models("p", {"observer": None}).to_dict()["models"]["observer"]["model_id"] == "scripted"
