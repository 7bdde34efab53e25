"""Request and response shapes of the notes, judgments and groom routes (docs/trust.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NOTE_ID_PATTERN = "^[0-9a-f]{12,64}$"
JUDGMENT_ID_PATTERN = "^j[0-9a-f]{16}$"
MAX_CONTENT = 4000
MAX_SITUATION = 1000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoteSave(_Strict):
    action: Literal["save"] = Field(description="Always `save` (the agent tool's other actions have their routes).")
    content: str = Field(min_length=1, max_length=MAX_CONTENT, description="The note: one line.")
    situation: str | None = Field(default=None, max_length=MAX_SITUATION, description="When the note applies.")
    tier: Literal["project", "user"] | None = Field(
        default=None, description="`project` (default) or `user` (follows the key's owner across projects)."
    )


class NoteUpdate(_Strict):
    content: str = Field(min_length=1, max_length=MAX_CONTENT, description="The corrected note: one line.")
    situation: str | None = Field(default=None, max_length=MAX_SITUATION, description="When the note applies.")


class Resolution(_Strict):
    outcome: bool = Field(description="Was the note relevant (true lets the next groom pass promote it)?")


class NoteWritten(BaseModel):
    id: str
    memory_id: str
    tier: Literal["project", "user"]
    trusted: Literal[False] = Field(description="Always false: a write never grants trust.")
    status: Literal["candidate", "unchanged"] = Field(
        description="What the write did: `candidate` (a candidate is stored: new, saved again after a forget, or"
        " identical to a waiting candidate) or `unchanged` (identical to a trusted or superseded note, left as"
        " it is)."
    )
    note_status: Literal["candidate", "trusted", "superseded"] = Field(
        description="The stored note's own status (for `unchanged`: the standing the identical note already has)."
    )
    duplicate: bool = Field(description="An identical note was stored before (this write added no new note).")
    supersedes: str | None = Field(description="update: the note this candidate replaces once promoted.")


class NoteOut(BaseModel):
    id: str
    memory_id: str
    tier: Literal["project", "user"]
    content: str
    situation: str
    status: Literal["candidate", "trusted", "superseded", "forgotten"]
    trusted: bool
    supersedes: str | None
    superseded_by: str | None
    date: str
    created_at: str


class NoteForgottenResponse(BaseModel):
    id: str
    memory_id: str
    status: Literal["forgotten"]
    trusted: bool


class NotesResponse(BaseModel):
    notes: list[NoteOut]
    truncated: bool = Field(description="More notes matched than `limit`: the newest are listed.")


class JudgmentOut(BaseModel):
    judgment_id: str
    note_id: str
    p: float | None = Field(description="The judge's confidence; null when no judge answered.")
    decision: Literal["inject", "hold", "escalate"]
    state: Literal["open", "escalated", "resolved"]
    outcome: bool | None
    error: str | None = Field(description="Why the judge call failed (`<code>: <message>`), if it did.")
    provider: str
    created_at: str
    resolved_at: str | None


class JudgmentsResponse(BaseModel):
    judgments: list[JudgmentOut]
    truncated: bool = Field(description="More judgments matched than `limit`: the newest are listed.")


class Promoted(BaseModel):
    id: str
    memory_id: str
    tier: Literal["project", "user"]
    judgment_id: str
    superseded: str | None


class GroomResponse(BaseModel):
    promoted: list[Promoted]
    escalated: list[JudgmentOut] = Field(description="Judgments waiting for a person (the newest 50).")
    escalated_count: int = Field(description="How many judgments wait for a person in all.")


class RecalledNoteOut(NoteOut):
    kind: Literal["note"]


class NoteHistoryStep(BaseModel):
    entry: Literal["judged", "resolved", "promoted", "superseded", "forgotten", "resaved"]
    at: str
    judgment_id: str | None
    p: float | None
    decision: Literal["inject", "hold", "escalate"] | None
    outcome: bool | None
    error: str | None


class NoteRecallResponse(BaseModel):
    """``recall`` of a note's id: the note, the judgments about it and its ledger history (no source events)."""

    memory: RecalledNoteOut
    judgments: list[JudgmentOut]
    history: list[NoteHistoryStep]
    provenance: str = Field(description="Says that a note cites no events, and how it earns trust.")
