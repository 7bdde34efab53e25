"""The trust floor's one door: notes, judgments, groom, calibration and the search and projection hooks.

:class:`TrustService` is built by the application floor (``Obsmem.trust``), which calls it from its own
methods; it holds no surface logic. Every method takes the caller's ``user`` (the owner of its user tier,
:data:`~obsmem.trust.stores.LOCAL_USER` for the local account, None for none).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import apsw

from obsmem.errors import NotFound, ValidationFailed
from obsmem.notes import parse_content, parse_situation, parse_status, parse_tier
from obsmem.pipeline import Projection
from obsmem.projects import ProjectRegistry
from obsmem.retrieval import SearchRequest, SearchResult
from obsmem.settings import Settings
from obsmem.storage import ProjectDatabase
from obsmem.trust.calibration import CalibrationReport, calibrate
from obsmem.trust.groom import GroomReport, groom_tier
from obsmem.trust.judges import Judge, make_judge
from obsmem.trust.judging import JUDGE_JOB, JUDGMENT_EVENT, JudgeJob, JudgingDispatcher, SearchEcho
from obsmem.trust.ledger import (
    Judgment,
    append_entry,
    calibration_rows,
    find_judgment,
    injected_candidates,
    judgment_counts,
    list_judgments,
    mirror_entry,
    parse_judgment_id,
    parse_state,
    resolve_judgment,
    trust_version,
)
from obsmem.trust.notes import (
    Note,
    NoteForgotten,
    NoteSuperseded,
    NoteWrite,
    chain_head,
    find_note,
    forget_note,
    list_notes,
    note_counts,
    parse_note_id,
    require_note,
    store_note,
)
from obsmem.trust.projection import InjectedNote, ProjectionWithNotes, with_untrusted
from obsmem.trust.recall import RecalledNote
from obsmem.trust.search import find_note_hits, merge_hits, parse_trust
from obsmem.trust.stores import TierStores
from obsmem.validation import project_name
from obsmem.work import eventlog

_Row = TypeVar("_Row")  # a note or a judgment, as a tier's listing returns it

log = logging.getLogger("obsmem.trust")


MAX_LIST = 500  # the most notes or judgments one listing returns (``limit``'s default and ceiling)


def parse_limit(value: object) -> int:
    """A listing's ``limit``: a whole number from 1 to :data:`MAX_LIST` (None: the most)."""
    if value is None:
        return MAX_LIST
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIST:
        raise ValidationFailed(f"limit must be a whole number from 1 to {MAX_LIST}", field="limit")
    return value


@dataclass(frozen=True)
class NoteList:
    notes: list[Note]
    truncated: bool = False  # more notes matched than ``limit``: the newest are listed

    def to_dict(self) -> dict[str, Any]:
        return {"notes": [note.to_dict() for note in self.notes], "truncated": self.truncated}


@dataclass(frozen=True)
class JudgmentList:
    judgments: list[Judgment]
    truncated: bool = False  # more judgments matched than ``limit``: the newest are listed

    def to_dict(self) -> dict[str, Any]:
        return {"judgments": [judgment.to_dict() for judgment in self.judgments], "truncated": self.truncated}


class TrustService:
    """Agent-written notes with earned trust, for every project of one data directory."""

    def __init__(
        self,
        settings: Settings,
        projects: ProjectRegistry,
        wake: Callable[[], None],
        *,
        stores: TierStores | None = None,
    ) -> None:
        """``stores``: where the tiers live when not in ``projects``' data directory (PostgreSQL)."""
        self.settings = settings.trust
        self.model = settings.model
        self.stores = stores if stores is not None else TierStores(projects)
        self.dispatcher = JudgingDispatcher(self.settings, settings.jobs, self.stores, wake)
        self._judge: Judge | None = None
        self._judge_lock = threading.Lock()
        self._last_groom: dict[str, float] = {}

    # -- the judge ---------------------------------------------------------------------------------

    def judge(self) -> Judge | None:
        with self._judge_lock:
            if self._judge is None:
                self._judge = make_judge(self.settings.judge, self.model)
            return self._judge

    @property
    def handlers(self) -> dict[str, Callable[..., None]]:
        return {JUDGE_JOB: JudgeJob(self.settings, self.stores, self.judge).handle}

    # -- notes -------------------------------------------------------------------------------------

    def _write_db(self, project: str, tier: str, user: str | None) -> ProjectDatabase:
        project_name(project)
        if tier == "user":
            # A project-tier write creates its project as any write does; a user-tier write stores nothing
            # in the project, so it must not answer for a project that every read calls not found.
            self.stores.project(project)
        db = self.stores.tier(project, tier, user, create=True)
        assert db is not None  # create=True raises instead
        return db

    def save(
        self, project: str, content: object, *, situation: object = None, tier: object = None, user: str | None
    ) -> NoteWrite:
        """Store a candidate note (never trusted)."""
        text, when, level = parse_content(content), parse_situation(situation), parse_tier(tier)
        with self._write_db(project, level, user).write() as conn:
            return store_note(conn, level, text, when)

    def _locate(self, project: str, note_id: object, user: str | None) -> tuple[ProjectDatabase, Note]:
        prefix = parse_note_id(note_id)
        for _, db in self.stores.readable(project, user):
            with db.read() as conn:
                note = find_note(conn, prefix)
            if note is not None:
                return db, note
        raise NotFound(f"note {prefix[:12]} does not exist", field="id")

    def update(
        self, project: str, note_id: object, content: object, *, situation: object = None, user: str | None
    ) -> NoteWrite:
        """A new candidate that replaces the note once it is promoted; the note itself is unchanged now."""
        text, when = parse_content(content), parse_situation(situation)
        db, original = self._locate(project, note_id, user)
        if original.status == "forgotten":
            raise NoteForgotten(
                f"note {original.id} was forgotten and cannot be updated: save the new text as a note of its own"
            )
        with db.write() as conn:
            if original.status == "superseded":
                head = chain_head(conn, original.note_id)
                raise NoteSuperseded(f"note {original.id} was superseded by note {head.id}: update that note instead")
            return store_note(conn, original.tier, text, when, supersedes=original.note_id)

    def forget(self, project: str, note_id: object, *, user: str | None) -> Note:
        """Hide a note from every search at once (status ``forgotten``, recorded in the ledger)."""
        db, found = self._locate(project, note_id, user)
        with db.write() as conn:
            note = require_note(conn, found.note_id)
            if note.status != "forgotten":
                append_entry(conn, "forgotten", note.note_id)
            return forget_note(conn, note)

    def notes(self, project: str, *, status: object = None, limit: object = None, user: str | None) -> NoteList:
        """The newest ``limit`` notes (default and most :data:`MAX_LIST`) of every tier the caller reads;
        ``truncated`` when more matched."""
        wanted, most = parse_status(status), parse_limit(limit)
        found = self._from_each_tier(project, user, lambda conn: list_notes(conn, wanted, most + 1))
        found.sort(key=lambda note: note.date, reverse=True)
        return NoteList(found[:most], truncated=len(found) > most)

    def _from_each_tier(
        self, project: str, user: str | None, read: Callable[[apsw.Connection], list[_Row]]
    ) -> list[_Row]:
        """What ``read`` finds in every tier this caller reads, project tier first."""
        found: list[_Row] = []
        for _, db in self.stores.readable(project, user):
            with db.read() as conn:
                found += read(conn)
        return found

    def recall_note(self, project: str, note_id: str, user: str | None) -> RecalledNote | None:
        """The note ``note_id`` (a 12-64 hex prefix) names in a tier this caller reads, with its judgments and
        history; None when no note has that id."""
        prefix = parse_note_id(note_id)
        for _, db in self.stores.readable(project, user):
            with db.read() as conn:
                note = find_note(conn, prefix)
                if note is not None:
                    return RecalledNote.read(conn, note)
        return None

    # -- judgments ---------------------------------------------------------------------------------

    def judgments(self, project: str, *, state: object = None, limit: object = None, user: str | None) -> JudgmentList:
        """The newest ``limit`` judgments (default and most :data:`MAX_LIST`) of every tier the caller reads;
        ``truncated`` when more matched."""
        wanted, most = parse_state(state), parse_limit(limit)
        found = self._from_each_tier(project, user, lambda conn: list_judgments(conn, wanted, most + 1))
        found.sort(key=lambda judgment: judgment.created_at, reverse=True)
        return JudgmentList(found[:most], truncated=len(found) > most)

    def resolve(self, project: str, judgment_id: object, outcome: object, *, user: str | None) -> Judgment:
        """Give a judgment its outcome (a person's answer); promotion follows at the next groom pass."""
        wanted = parse_judgment_id(judgment_id)
        if not isinstance(outcome, bool):
            raise ValidationFailed("outcome must be true or false", field="outcome")
        for tier, db in self.stores.readable(project, user):
            with db.read() as conn:
                if find_judgment(conn, wanted) is None:
                    continue
            with db.write() as conn:
                resolved = resolve_judgment(conn, wanted, outcome)
            if tier == "user":  # the project's ledger holds every judgment made for it (docs/trust.md)
                with self.stores.project(project).write() as conn:
                    mirror_entry(conn, "resolved", resolved)
            return resolved
        raise NotFound(f"judgment {wanted} does not exist", field="judgment_id")

    # -- groom and calibration ---------------------------------------------------------------------

    def groom(self, project: str, *, user: str | None) -> GroomReport:
        """Promote what resolved true, at most ``trust.groom_max_promotions`` over both tiers."""
        report = GroomReport()
        budget = self.settings.groom_max_promotions
        for _, db in self.stores.readable(project, user):
            part = groom_tier(db, budget)
            budget -= len(part.promoted)
            report.add(part)
        return report

    def groom_on_schedule(self, project: str, db: ProjectDatabase) -> None:
        """The workers' housekeeping task: groom a project (and, on the same clock, every user tier) once
        per ``trust.groom_seconds``."""
        now = time.monotonic()
        if now - self._last_groom.get(project, float("-inf")) < self.settings.groom_seconds:
            return
        self._last_groom[project] = now
        groom_tier(db, self.settings.groom_max_promotions, escalations=False)  # nobody reads a report here
        for owner in self.stores.user_names():
            key = f"user:{owner}"
            if now - self._last_groom.get(key, float("-inf")) < self.settings.groom_seconds:
                continue
            self._last_groom[key] = now
            user_db = self.stores.user(owner)
            if user_db is not None:
                groom_tier(user_db, self.settings.groom_max_promotions, escalations=False)

    def calibrate(self, project: str, *, user: str | None, tier: object = None) -> CalibrationReport:
        """How the tier's resolved judgments turned out against ``p`` (project tier unless ``tier='user'``)."""
        level = parse_tier(tier)
        db = self.stores.tier(project, level, user)
        rows = []
        if db is not None:
            with db.read() as conn:
                rows = calibration_rows(conn)
        return calibrate(rows, threshold=self.settings.threshold, target_precision=self.settings.target_precision)

    # -- search and projection ---------------------------------------------------------------------

    @staticmethod
    def trust_level(trust: object) -> str:
        """``trust`` checked: ``trusted`` (also for None) or ``all``; else ``invalid_request`` on ``trust``."""
        return parse_trust(trust)

    def search(
        self, result: SearchResult, project: str, request: SearchRequest, trust: object, user: str | None
    ) -> SearchResult:
        """Merge the notes the request finds into ``result``; then queue judging in the background.

        Notes are memories: a search of the conversation alone (``scope="conversation"``) gets none."""
        if request.scope == "conversation" or result.nothing_close:
            # Nothing was close enough to return: a note that shares a word is no closer, and is not judged.
            return result
        level = parse_trust(trust)
        notes, any_candidate = find_note_hits(self.stores.readable(project, user), request, level)
        merged = merge_hits(result, notes, request)
        if any_candidate:
            self.dispatcher.after_search(SearchEcho(project, user, request.query, request.mode, request.window))
        return merged

    def projection(self, projection: Projection, project: str, user: str | None) -> ProjectionWithNotes:
        found: list[InjectedNote] = []
        limit = self.settings.injected_max
        for _, db in self.stores.readable(project, user):
            if limit <= 0:
                break
            with db.read() as conn:
                for note_id, p in injected_candidates(conn, limit):
                    found.append(InjectedNote(require_note(conn, note_id), p))
        found.sort(key=lambda item: item.p, reverse=True)
        return with_untrusted(projection, found[: max(0, limit)])

    def version(self, project: str, user: str | None) -> str:
        """A token that changes whenever the trust state the projection reads could have changed, in any tier
        the caller reads (a judgment, a resolution, a promotion, a forget, a re-save)."""
        parts = []
        for tier, db in self.stores.readable(project, user):
            with db.read() as conn:
                parts.append(f"{tier[0]}{trust_version(conn)}")
        return "-".join(parts)

    def status(self, project: str, db: ProjectDatabase) -> dict[str, Any]:
        """The project tier's notes and judgments by state, and the last judge failure (code and time)."""
        with db.read() as conn:
            failed = eventlog.list_events(conn, types=(JUDGMENT_EVENT,), newest=True, limit=50, after=0)
            return {
                "notes": note_counts(conn),
                "judgments": judgment_counts(conn),
                "last_judge_error": next(
                    (
                        {"error": event.data["error"], "at": event.created_at, "judgment_id": event.data["judgment_id"]}
                        for event in reversed(failed)
                        if "error" in event.data
                    ),
                    None,
                ),
            }

    def user_tier_names(self) -> list[str]:
        """The owners who have a user tier (a database each on SQLite, a schema each on PostgreSQL)."""
        return self.stores.user_names()

    def upgrade_user_tier(self, owner: str) -> None:
        """Bring an owner's user tier's schema up to date now (``obsmem upgrade``)."""
        self.stores.upgrade_user(owner)

    def close(self) -> None:
        self.dispatcher.close()
        with self._judge_lock:
            if self._judge is not None:
                self._judge.close()
                self._judge = None
        self.stores.close()
