"""Session evidence in hybrid search (``[semantic.fusion] session_weight``): a memory of the session that
holds the strongest match rises toward it, through the product's search, on both storage backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from obsmem import Obsmem
from obsmem.settings import SemanticSettings, load_settings
from support.model_server import ModelServer
from support.semantic_service import add_memories, semantic_settings

QUERY = "invoice export timeout nightly"
# Session "work": the strong match, a note written beside it that shares none of the query's words, and one
# that shares one. Session "other": a memory that shares two. Without session evidence the other session's
# memory ranks second; with it, the strong match's session lifts its note above it.
WORK = [
    ("2024-05-01 09:00", "invoice export timeout in the nightly job"),
    ("2024-05-01 09:10", "the worker memory limit was raised to four gigabytes"),
    ("2024-05-01 09:20", "chunk size of the nightly batch halved"),
]
# With supersession on: a memory of a session before the others, which supersession never moves up.
OLDER = [("2024-04-20 09:00", "nightly export of the old wiki pages")]
OTHER = [("2024-05-02 09:00", "nightly export of the wiki backup moved to another bucket")]


def ranking(
    tmp_path: Path, server: ModelServer, storage: dict[str, Any], weight: float, query: str = QUERY, **more: Any
) -> list[str]:
    section = semantic_settings(server, fusion={"session_weight": weight}, **more)
    settings = load_settings(data_dir=tmp_path / f"w{weight}", semantic=section, **storage)
    project = f"p{round(weight * 10)}"  # one PostgreSQL database serves both runs of a test
    with Obsmem(settings, background_indexing=False) as memory:
        work = add_memories(memory, project, WORK, session="work")
        other = add_memories(memory, project, OTHER, session="other")
        older = add_memories(memory, project, OLDER, session="older") if more else []
        memory.index(project)
        hits = memory.search(project, query, mode="hybrid", limit=4).hits
        names = {**dict(zip(work, ("strong", "between", "batch"), strict=True)), other[0]: "backup"}
        names.update({memory_id: "older" for memory_id in older})
        return [next(name for full, name in names.items() if full.startswith(hit.id)) for hit in hits]


def test_the_default_weight() -> None:
    assert SemanticSettings().fusion.session_weight == 0.3


def test_the_strong_matchs_session_lifts_its_weaker_memory(
    tmp_path: Path, model_server: ModelServer, backend_storage: dict[str, Any]
) -> None:
    without = ranking(tmp_path, model_server, backend_storage, 0.0)
    with_it = ranking(tmp_path, model_server, backend_storage, 0.3)
    assert without == ["strong", "backup", "between", "batch"]
    assert with_it == ["strong", "between", "backup", "batch"]  # each session's best keeps its place


def test_a_question_about_the_present_is_left_to_supersession(tmp_path: Path, model_server: ModelServer) -> None:
    """With supersession on, a question about the present asks for the latest decision, across sessions:
    session evidence stays off for it, and on for every other question."""
    on = {"supersession": {"enabled": True}}
    now = QUERY + " now"
    assert ranking(tmp_path / "a", model_server, {}, 0.3, now, **on) == ["backup", "strong", "between", "older"]
    assert ranking(tmp_path / "b", model_server, {}, 0.0, now, **on) == ["backup", "strong", "between", "older"]
    # Not about the present: session evidence lifts the work session's batch note past the older session's.
    assert ranking(tmp_path / "c", model_server, {}, 0.0, QUERY, **on) == ["strong", "between", "older", "backup"]
    assert ranking(tmp_path / "d", model_server, {}, 0.3, QUERY, **on) == ["strong", "between", "batch", "older"]
