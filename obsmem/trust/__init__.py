"""Agent-written notes with earned trust: notes, the judge, the decision rule, the ledger, groom, calibration.

Observations and reflections stand on their provenance (they cite what they came from). Notes are written
directly by an agent (the ``memory`` tool) or a person, so they earn trust instead: every write lands as an
untrusted candidate; after a search, the candidates it turns up go to a judge in the background; the judge's
confidence decides, by :func:`decide_injection`, whether a candidate is shown (marked untrusted) or a person
is asked; a judgment a person resolves true lets the next groom pass promote the note to trusted. Every
step is appended to the tier's ledger. docs/trust.md tells the whole story.

Layout::

    service.py      TrustService: the one door the application floor calls
    notes.py        the notes table: save, update (supersede on promotion), forget, list, search
    recall.py       recall of a note id: the note, its judgments and its ledger history
    ledger.py       judgments (the calibration corpus) and the append-only trust ledger
    decision.py     decide_injection
    judges.py       the http, model and human judges
    judging.py      after search: pick candidates, queue the judge job; the job itself
    groom.py        the groom pass (bounded promotions, one transaction each)
    calibration.py  reliability per p bucket, precision at the threshold, a suggested threshold
    search.py       notes as search hits (kind ``note``), merged after memory search
    projection.py   judged-relevant candidates in their own section of a session's projection
    stores.py       where each tier lives: the project database, ``users/<owner>/obsmem.db``

This floor stands between the application floor and the stages: it reads retrieval's result shapes and the
pipeline's model client and projection, and only the application floor (and the surfaces, through it)
imports it.
"""

from obsmem.notes import STATUSES, TIERS, parse_content, parse_situation, parse_tier
from obsmem.trust.calibration import CalibrationReport
from obsmem.trust.decision import DECISIONS, decide_injection
from obsmem.trust.groom import GroomReport
from obsmem.trust.judges import JudgeBadResponse, JudgeFailed, JudgeTimeout
from obsmem.trust.judging import JUDGE_JOB, JUDGMENT_EVENT
from obsmem.trust.ledger import STATES, Judgment
from obsmem.trust.notes import Note, NoteWrite, parse_note_id
from obsmem.trust.projection import ProjectionWithNotes
from obsmem.trust.recall import RecalledNote
from obsmem.trust.search import TRUST_LEVELS, NoteHit
from obsmem.trust.service import JudgmentList, NoteList, TrustService
from obsmem.trust.stores import LOCAL_USER, TierStores

__all__ = [
    "DECISIONS",
    "JUDGE_JOB",
    "JUDGMENT_EVENT",
    "LOCAL_USER",
    "STATES",
    "STATUSES",
    "TIERS",
    "TRUST_LEVELS",
    "CalibrationReport",
    "GroomReport",
    "JudgeBadResponse",
    "JudgeFailed",
    "JudgeTimeout",
    "Judgment",
    "JudgmentList",
    "Note",
    "NoteHit",
    "NoteList",
    "NoteWrite",
    "ProjectionWithNotes",
    "RecalledNote",
    "TierStores",
    "TrustService",
    "decide_injection",
    "parse_content",
    "parse_note_id",
    "parse_situation",
    "parse_tier",
]
