"""Notes and trust on both backends: the trust floor's scenarios through ``Obsmem``, on SQLite files and on
PostgreSQL (the project tier in the project's schema, the user tier in a schema of its own).

Judgments are recorded through the ledger's own function (as the judge job does) instead of by workers,
which do not run on PostgreSQL: what is held to SQLite's behaviour here is the notes, the ledger, groom,
search and recall, each run twice by the same assertions.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from obsmem.app import Obsmem
from obsmem.errors import NotFound, ValidationFailed
from obsmem.settings import load_settings
from obsmem.trust import JUDGE_JOB
from obsmem.trust.ledger import ledger_entries, record_judgment, trust_version
from obsmem.work import JobQueue


@pytest.fixture(params=["sqlite", "postgres"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Obsmem]:
    options: dict[str, Any] = {"trust": {"judge": {"provider": "human"}}}
    if request.param == "postgres":
        options["storage"] = {"backend": "postgres", "dsn": request.getfixturevalue("postgres_dsn")}
    with Obsmem(load_settings(data_dir=tmp_path / "data", **options)) as service:
        assert (type(service).__name__ == "PostgresObsmem") == (request.param == "postgres")
        yield service


def _judge(service: Obsmem, project: str, note_id: str, number: int, *, tier: str = "project") -> str:
    """Record an escalated judgment of the note (what the human judge's job writes) and resolve it true."""
    judgment_id = f"j{number:016x}"
    db = service.trust.stores.tier(project, tier, "@local")
    assert db is not None
    with db.write() as conn:
        assert record_judgment(conn, judgment_id, note_id, "q", "human", None, "escalate", None)
    service.resolve_judgment(project, judgment_id, True)
    return judgment_id


def test_a_note_is_a_candidate_until_groom_promotes_it_then_search_finds_it(memory: Obsmem) -> None:
    written = memory.save_note("app", "deploy with make ship", situation="when releasing").to_dict()
    assert (written["trusted"], written["status"], written["duplicate"]) == (False, "candidate", False)
    assert memory.save_note("app", "deploy with make ship", situation="when releasing").to_dict()["duplicate"]
    assert [hit.kind for hit in memory.search("app", "make ship").hits] == []
    assert [hit.to_dict()["trusted"] for hit in memory.search("app", "MAKE ship", trust="all").hits] == [False]
    note = memory.notes("app").notes[0]
    judgment = _judge(memory, "app", note.note_id, 1)
    report = memory.groom("app").to_dict()
    assert [item["judgment_id"] for item in report["promoted"]] == [judgment]
    hits = memory.search("app", "make ship").to_dict()["hits"]
    assert [(hit["kind"], hit["trusted"], hit["id"]) for hit in hits] == [("note", True, note.id)]
    assert memory.search("app", "make_ship").hits == []  # `_` is literal
    with memory.database("app").read() as conn:
        assert [entry["entry"] for entry in ledger_entries(conn, note.note_id)] == ["judged", "resolved", "promoted"]
    recalled = memory.recall("app", note.id).to_dict()
    assert (recalled["memory"]["kind"], recalled["memory"]["status"]) == ("note", "trusted")
    assert [entry["entry"] for entry in recalled["history"]] == ["judged", "resolved", "promoted"]


def test_updates_forgets_and_resaves_keep_the_ledger_and_the_notes_in_step(memory: Obsmem) -> None:
    original = memory.save_note("app", "lint with flake8").note
    _judge(memory, "app", original.note_id, 1)
    memory.groom("app")
    update = memory.update_note("app", original.id, "lint with ruff").note
    assert memory.notes("app", status="trusted").notes[0].note_id == original.note_id  # not yet replaced
    _judge(memory, "app", update.note_id, 2)
    memory.groom("app")
    statuses = {note.content: note.status for note in memory.notes("app").notes}
    assert statuses == {"lint with flake8": "superseded", "lint with ruff": "trusted"}
    memory.forget_note("app", update.id)
    assert memory.search("app", "lint", trust="all").hits == []
    again = memory.save_note("app", "lint with ruff", situation="").note
    assert again.status in ("candidate", "forgotten")
    with memory.database("app").read() as conn:
        entries = [entry["entry"] for entry in ledger_entries(conn, update.note_id)]
    assert entries[-2:] == ["forgotten", "resaved"] or entries[-1] == "forgotten"


def test_the_ledger_refuses_every_change(memory: Obsmem) -> None:
    note = memory.save_note("app", "a fact").note
    memory.forget_note("app", note.id)
    statements = ["UPDATE trust_ledger SET entry = 'promoted'", "DELETE FROM trust_ledger"]
    if type(memory).__name__ == "PostgresObsmem":
        statements.append("TRUNCATE trust_ledger")  # SQLite has no TRUNCATE
    for statement in statements:
        with pytest.raises(Exception, match="append-only"), memory.database("app").write() as conn:
            conn.execute(statement)
    with memory.database("app").read() as conn:
        assert [entry["entry"] for entry in ledger_entries(conn, note.note_id)] == ["forgotten"]


def test_the_user_tier_is_shared_by_the_users_projects_and_mirrored_into_the_projects_ledger(memory: Obsmem) -> None:
    memory.save_note("app", "commit messages cite the ticket")
    memory.append_events("web", "s1", [{"role": "user", "content": "hello"}])
    note = memory.save_note("app", "I like short commit messages", tier="user").note
    assert {n.content for n in memory.notes("web").notes} == {"I like short commit messages"}
    judgment = _judge(memory, "app", note.note_id, 7, tier="user")
    with memory.database("app").read() as conn:
        mirrored = [(e["entry"], e["tier"], e["judgment_id"]) for e in ledger_entries(conn, note.note_id)]
    assert mirrored == [("resolved", "user", judgment)]
    memory.groom("web")
    assert [hit.to_dict()["id"] for hit in memory.search("web", "short commit").hits] == [note.id]
    assert memory.project_names() == ["app", "web"]  # a user tier is never listed as a project
    assert "I like" not in str(memory.status("app").to_dict())


def test_groom_is_bounded_per_pass_and_the_trust_version_moves_with_the_ledger(memory: Obsmem) -> None:
    notes = [memory.save_note("app", f"fact number {n}").note for n in range(55)]
    versions = {memory.trust.version("app", None)}
    for n, note in enumerate(notes):
        _judge(memory, "app", note.note_id, n)
    versions.add(memory.trust.version("app", None))
    assert len(memory.groom("app").promoted) == 50 and len(memory.groom("app").promoted) == 5
    versions.add(memory.trust.version("app", None))
    assert len(versions) == 3
    with memory.database("app").read() as conn:
        assert int(trust_version(conn)) == 55 * 3


def test_bad_notes_are_refused_with_the_field_named_and_unknown_ids_are_not_found(memory: Obsmem) -> None:
    for content in ("", "two\nlines", 7, "x" * 4001):
        with pytest.raises(ValidationFailed) as caught:
            memory.save_note("app", content)
        assert caught.value.field == "content" and "two" not in caught.value.message
    with pytest.raises(NotFound):
        memory.forget_note("app", "0" * 12)
    with pytest.raises(NotFound):
        memory.recall("app", "0" * 12)


def test_a_search_that_finds_candidates_queues_one_judge_job(memory: Obsmem) -> None:
    memory.save_note("app", "rotate the signing keys monthly")
    memory.search("app", "signing keys", trust="all")
    memory.trust.dispatcher.flush()
    memory.search("app", "signing keys", trust="all")
    memory.trust.dispatcher.flush()
    queue = JobQueue(memory.database("app"))  # type: ignore[arg-type]
    assert [job["kind"] for job in queue.list_jobs()] == [JUDGE_JOB]  # the same search again adds no work


def test_the_keyword_match_of_notes_finds_the_same_notes_on_both_backends(memory: Obsmem) -> None:
    """Hybrid search merges notes through this match (SQLite: FTS5; PostgreSQL: a text-search vector)."""
    from obsmem.dates import DateWindow
    from obsmem.trust.notes import search_keywords

    memory.save_note("app", "release with make ship", situation="when releasing on Fridays")
    memory.save_note("app", "the staging keys rotate monthly")
    memory.save_note("app", "lint with ruff, not flake8")
    memory.save_note("app", "C++ builds need 'quotes' & pipes | here")
    with memory.database("app").read() as conn:
        found = {
            query: [match.note.content for match in search_keywords(conn, query, ("candidate",), DateWindow(), 10)]
            for query in ("How do I RELEASE on fridays?", "staging keys", "flake8 ruff lint", "c++ | 'quotes'", "zzz")
        }
    assert found == {
        "How do I RELEASE on fridays?": ["release with make ship"],
        "staging keys": ["the staging keys rotate monthly"],
        "flake8 ruff lint": ["lint with ruff, not flake8"],
        "c++ | 'quotes'": ["C++ builds need 'quotes' & pipes | here"],
        "zzz": [],
    }
