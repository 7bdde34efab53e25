"""Judging after search: candidates relevant to a query go to the judge in the background.

A search's hits are fixed before anything here runs, and nothing here can change them: the search hands the
query to :class:`JudgingDispatcher` and returns. On its own thread the dispatcher picks the top untrusted
candidates the query finds (at most ``trust.judged_per_search``, three at most, de-duplicated by content and
situation) and queues one ``trust_judge`` job on the project's durable queue. A worker runs the job
(:func:`run_judge_job`): each candidate is rated by the configured judge, the decision rule is applied with
the tier's count of resolved judgments, and the judgment, its ledger entry and a ``trust_judgment`` event
commit together. A failed call becomes an escalation carrying its error code. A user-tier judgment is
stored in the user tier's database (its calibration corpus) and its ledger entry is mirrored into the
project's ledger, which so holds every judgment the project asked for.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from obsmem.dates import DateWindow
from obsmem.faults import crash_point
from obsmem.notes import JUDGMENT_EVENT, judgment_event_data
from obsmem.redaction import redact_text
from obsmem.settings import JobSettings, TrustSettings
from obsmem.trust.decision import decide_injection
from obsmem.trust.judges import Judge, JudgeCrashed, JudgeFailed, JudgeRequest
from obsmem.trust.ledger import find_judgment, has_pending_judgment, mirror_entry, record_judgment, resolved_count
from obsmem.trust.notes import Note, find_note, search_exact, search_keywords
from obsmem.trust.stores import TierStores
from obsmem.work import JobContext, JobQueue, LeaseLost, eventlog

log = logging.getLogger("obsmem.trust")

JUDGE_JOB = "trust_judge"
MAX_JUDGED = 3
# Candidates looked at per tier before de-duplication picks the few that are judged.
_LOOKED_AT = 12
# How long the judging thread lets searches gather before it takes them in one round.
SETTLE_SECONDS = 0.05


def judgment_id_for(dispatch: str, note_id: str) -> str:
    """The same id for the same note in the same dispatch, so a retried job never judges twice."""
    return "j" + hashlib.sha256(f"{dispatch}:{note_id}".encode()).hexdigest()[:16]


def _same_note_key(note: Note) -> tuple[str, str]:
    return (" ".join(note.content.casefold().split()), " ".join(note.situation.casefold().split()))


def pick_candidates(tiers: list[tuple[str, list[Note]]], count: int) -> list[tuple[str, Note]]:
    """The first ``count`` candidates over the tiers' ranked lists (alternating), one per content and
    situation."""
    picked: list[tuple[str, Note]] = []
    seen: set[tuple[str, str]] = set()
    depth = max((len(notes) for _, notes in tiers), default=0)
    for position in range(depth):
        for tier, notes in tiers:
            if position >= len(notes):
                continue
            key = _same_note_key(notes[position])
            if key in seen:
                continue
            seen.add(key)
            picked.append((tier, notes[position]))
            if len(picked) >= count:
                return picked
    return picked


@dataclass(frozen=True)
class SearchEcho:
    """What judging needs of a finished search."""

    project: str
    user: str | None
    query: str
    mode: str
    window: DateWindow


class JudgingDispatcher:
    """Queues judge jobs after searches, on one thread of its own so a search never waits for it."""

    def __init__(
        self, settings: TrustSettings, jobs: JobSettings, stores: TierStores, wake: Callable[[], None]
    ) -> None:
        self.settings = settings
        self.jobs = jobs
        self.stores = stores
        self.wake = wake
        self._waiting: dict[SearchEcho, None] = {}  # searches handed over, in order, each once
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._changed = threading.Condition()

    @property
    def enabled(self) -> bool:
        return self.settings.judge.provider != "none" and self.settings.judged_per_search > 0

    def after_search(self, echo: SearchEcho) -> None:
        """Hand the search to the judging thread; the same search already waiting there is not handed twice."""
        if not self.enabled:
            return
        with self._changed:
            if self._closed or echo in self._waiting:
                return
            self._waiting[echo] = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="obsmem-judging", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every search handed over so far has queued its job (tests and one-shot commands)."""
        with self._changed:
            self._changed.notify_all()
            if not self._changed.wait_for(lambda: not self._waiting and not self._busy, timeout=timeout):
                raise TimeoutError("searches are still waiting to be judged")

    def _run(self) -> None:
        # The thread settles for a moment before each round, so a burst of searches is taken in one round
        # and the thread does not compete with the searches themselves for the interpreter (the GIL).
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._waiting) or self._closed)
                if self._closed and not self._waiting:
                    return
            time.sleep(SETTLE_SECONDS)
            with self._changed:
                batch = list(self._waiting)
                self._waiting.clear()
                self._busy = True
            try:
                for echo in batch:
                    self._dispatch(echo)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()

    def _dispatch(self, echo: SearchEcho) -> None:
        try:
            self.queue_judging(echo)
        except Exception as exc:  # noqa: BLE001 - a search must never fail for its judging
            log.warning("queueing judgments for project %s failed: %s", echo.project, type(exc).__name__)

    def queue_judging(self, echo: SearchEcho) -> int | None:
        """Pick the candidates ``echo``'s query finds and queue their job; the job id, or None."""
        ranked: list[tuple[str, list[Note]]] = []
        for tier, db in self.stores.readable(echo.project, echo.user):
            with db.read() as conn:
                if echo.mode == "exact":
                    notes = search_exact(conn, echo.query, ("candidate",), echo.window, _LOOKED_AT)
                else:
                    found = search_keywords(conn, echo.query, ("candidate",), echo.window, _LOOKED_AT)
                    notes = [match.note for match in found]
                # Notes that already wait on a judgment leave the ranking before the top ones are picked:
                # otherwise, with judgments that wait for people, the same top few would fill every pick
                # and the candidates ranked below them would never be judged.
                notes = [note for note in notes if not has_pending_judgment(conn, note.note_id)]
            ranked.append((tier, notes))
        picked = pick_candidates(ranked, min(MAX_JUDGED, self.settings.judged_per_search))
        if not picked:
            return None
        queue = JobQueue(
            self.stores.project(echo.project),
            lease_seconds=self.jobs.lease_seconds,
            retry_backoff_seconds=self.jobs.retry_backoff_seconds,
            max_attempts=self.jobs.max_retries + 1,
        )
        # One queued job per set of candidates: repeated searches for the same thing add no work.
        names = ",".join(sorted(note.note_id for _, note in picked))
        dedupe = f"{JUDGE_JOB}:{hashlib.sha256(names.encode()).hexdigest()[:32]}"
        if queue.has_queued_dedupe(dedupe):
            return None
        payload: dict[str, Any] = {
            "dispatch": uuid.uuid4().hex,
            # Stored in the job and the judgment and sent to the judge: a query pasted with a credential in it
            # is redacted as everything obsmem stores is.
            "query": redact_text(echo.query),
            "user": echo.user,
            "notes": [{"tier": tier, "note_id": note.note_id} for tier, note in picked],
        }
        job = queue.enqueue(JUDGE_JOB, payload, dedupe_key=dedupe)
        self.wake()
        return job.job_id

    def close(self) -> None:
        """Queue what was handed over, then stop the thread."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)


class JudgeJob:
    """The ``trust_judge`` handler: rate each candidate of the job, decide, record.

    No candidate is left without a record because something went wrong: a judge that raises anything is an
    escalation carrying its code (``judge_error`` and the exception's type for the unexpected), and on the
    job's last attempt a failure outside the judge call (storage, a lost lease) is recorded as a
    ``judge_error`` escalation too, so the judgment waits for a person instead of vanishing with the job.
    Earlier attempts let the failure through: the queue retries, with the same judgment ids."""

    def __init__(self, settings: TrustSettings, stores: TierStores, judge: Callable[[], Judge | None]) -> None:
        self.settings = settings
        self.stores = stores
        self.judge = judge

    def handle(self, ctx: JobContext) -> None:
        payload = ctx.lease.payload
        judge = self.judge()
        if judge is None:
            return  # judging was switched off after the job was queued
        last_attempt = ctx.lease.attempt >= ctx.lease.max_attempts
        stopped: BaseException | None = None
        for ref in payload.get("notes", [])[:MAX_JUDGED]:
            tier, note_id = str(ref["tier"]), str(ref["note_id"])
            if stopped is None:
                try:
                    ctx.raise_if_lost()
                    self._judge_one(ctx, judge, payload, tier, note_id)
                    continue
                except Exception as exc:
                    if not last_attempt:
                        raise
                    log.warning("judging in project %s stopped: %s", ctx.project, type(exc).__name__)
                    if isinstance(exc, LeaseLost):
                        stopped = exc  # this worker no longer owns the job: escalate the rest, then stop
                    failure = JudgeCrashed.of(exc, "judging stopped before its decision was stored")
            else:
                failure = JudgeCrashed.of(stopped, "judging stopped before its decision was stored")
            self._escalate_failure(ctx, judge, payload, tier, note_id, failure)
        if stopped is not None:
            raise stopped

    def _candidate(self, ctx: JobContext, payload: dict[str, Any], tier: str, note_id: str) -> Note | None:
        """The note if it still waits as a candidate with no judgment of its current life pending."""
        db = self.stores.tier(ctx.project, tier, payload.get("user"))
        if db is None:
            return None
        with db.read() as conn:
            note = find_note(conn, note_id)
            if note is None or note.status != "candidate" or has_pending_judgment(conn, note_id):
                return None
        return note

    def _judge_one(self, ctx: JobContext, judge: Judge, payload: dict[str, Any], tier: str, note_id: str) -> None:
        judgment_id = judgment_id_for(str(payload["dispatch"]), note_id)
        if tier == "user" and self._finish_mirror(ctx, payload, judgment_id, fenced=True):
            return  # an earlier attempt stored this judgment: only its copy in the project was left to write
        note = self._candidate(ctx, payload, tier, note_id)
        if note is None:
            return
        p: float | None = None
        error: str | None = None
        if not judge.asks_people:
            query = redact_text(str(payload["query"]))  # a job queued before queries were redacted, too
            request = JudgeRequest(judgment_id, note.id, note.content, note.situation, query)
            try:
                p = judge.rate(request)
            except JudgeFailed as exc:
                error = f"{exc.code}: {exc.message}"
            except Exception as exc:  # noqa: BLE001 - any failure of the judge is an escalation, never a "no"
                failure = JudgeCrashed.of(exc, "the judge failed unexpectedly")
                error = f"{failure.code}: {failure.message}"
        ctx.raise_if_lost()
        self._record(ctx, judge, payload, tier, note, judgment_id, p, error, fenced=True)

    def _escalate_failure(
        self, ctx: JobContext, judge: Judge, payload: dict[str, Any], tier: str, note_id: str, failure: JudgeCrashed
    ) -> None:
        """Record the failure as an escalation, without the fence: a lost lease must not lose the record. The
        judgment id is the job's own, so a worker that took the job over writes the same judgment once."""
        try:
            judgment_id = judgment_id_for(str(payload["dispatch"]), note_id)
            if tier == "user" and self._finish_mirror(ctx, payload, judgment_id, fenced=False):
                return
            note = self._candidate(ctx, payload, tier, note_id)
            if note is None:
                return
            error = f"{failure.code}: {failure.message}"
            self._record(ctx, judge, payload, tier, note, judgment_id, None, error, fenced=False)
        except Exception as exc:  # noqa: BLE001 - the job fails as before; the note is judged at a later search
            log.warning("recording a judging failure in project %s failed: %s", ctx.project, type(exc).__name__)

    def _record(
        self,
        ctx: JobContext,
        judge: Judge,
        payload: dict[str, Any],
        tier: str,
        note: Note,
        judgment_id: str,
        p: float | None,
        error: str | None,
        *,
        fenced: bool,
    ) -> None:
        """Store the judgment, its ledger entry and its event (a user-tier judgment in the user tier's
        database, its ledger entry mirrored into the project's)."""
        query = redact_text(str(payload["query"]))  # a job queued before queries were redacted, too
        project_write = ctx.fenced_write if fenced else ctx.db.write
        if tier == "project":
            with project_write() as conn:
                decision = self._decide(conn, p)
                if record_judgment(conn, judgment_id, note.note_id, query, judge.name, p, decision, error):
                    self._log(conn, ctx, judgment_id, note, tier, p, decision, error)
            return
        db = self.stores.tier(ctx.project, tier, payload.get("user"))
        if db is None:
            return
        with db.write() as conn:
            decision = self._decide(conn, p)
            record_judgment(conn, judgment_id, note.note_id, query, judge.name, p, decision, error)
        crash_point("judging:user-recorded")
        self._finish_mirror(ctx, payload, judgment_id, fenced=fenced)

    def _finish_mirror(self, ctx: JobContext, payload: dict[str, Any], judgment_id: str, *, fenced: bool) -> bool:
        """Copy a user-tier judgment into the project's ledger, with its event, unless that was done; False
        when the user tier holds no such judgment yet.

        The two databases commit one after the other, so the copy can be missing when an attempt failed (or
        its worker died) between them: the retry, which finds the judgment stored, writes the copy then."""
        db = self.stores.tier(ctx.project, "user", payload.get("user"))
        if db is None:
            return False
        with db.read() as conn:
            judgment = find_judgment(conn, judgment_id)
            note = find_note(conn, judgment.note_id) if judgment is not None else None
        if judgment is None or note is None:
            return False
        with (ctx.fenced_write if fenced else ctx.db.write)() as conn:
            if mirror_entry(conn, "judged", judgment):
                self._log(conn, ctx, judgment_id, note, "user", judgment.p, judgment.decision, judgment.error)
        return True

    def _decide(self, conn: Any, p: float | None) -> str:
        return decide_injection(
            p, resolved_count(conn), threshold=self.settings.threshold, min_sample=self.settings.min_sample
        )

    @staticmethod
    def _log(
        conn: Any,
        ctx: JobContext,
        judgment_id: str,
        note: Note,
        tier: str,
        p: float | None,
        decision: str,
        error: str | None,
    ) -> None:
        data = judgment_event_data(judgment_id, note.note_id, tier, p, decision, error)
        eventlog.record(conn, JUDGMENT_EVENT, job_id=ctx.lease.job_id, data=data)
