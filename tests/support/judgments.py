"""Judgments written as the judging job writes them, for tests that need one without running a judge."""

from __future__ import annotations

import apsw

from obsmem.notes import JUDGMENT_EVENT, judgment_event_data
from obsmem.trust.ledger import record_judgment
from obsmem.work import eventlog


def record_judged(
    conn: apsw.Connection,
    judgment_id: str,
    note_id: str,
    query: str,
    provider: str,
    p: float | None,
    decision: str,
    error: str | None,
) -> None:
    """A judgment of a project note, in the caller's write transaction, with what the judging job writes beside
    it: its 'judged' ledger entry and its ``trust_judgment`` event (which a restore checks it against)."""
    assert record_judgment(conn, judgment_id, note_id, query, provider, p, decision, error)
    data = judgment_event_data(judgment_id, note_id, "project", p, decision, error)
    eventlog.record(conn, JUDGMENT_EVENT, data=data)
