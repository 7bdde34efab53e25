"""The typed results of :class:`obsmem.app.Obsmem`: one frozen dataclass per answer, nested where the
answer nests.

Fields are declared in the order of the JSON document every surface publishes (the HTTP response
models, the CLI's ``--json`` output, the tool results), and ``to_dict()`` gives that document. Field
meanings are documented once, in docs/http-api.md and docs/pipeline.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from obsmem.app.typed import OMIT_IF_NONE, JsonResult
from obsmem.retrieval import Hit, RecalledMemory, SourceEvent

# -- memories ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Forgotten(JsonResult):
    """``forget``: the memory that was deleted, as a search hit."""

    deleted: Hit


@dataclass(frozen=True)
class Recollection(JsonResult):
    """``recall``: the memory, the events it cites (observations) or the observations that support it
    (reflections). The parts are retrieval's own types (re-exported here), wrapped as recall built them."""

    memory: RecalledMemory
    sources: tuple[SourceEvent, ...]
    supporting: tuple[Hit, ...]


# -- the semantic index -----------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexStatus(JsonResult):
    """How far the semantic index of a project has got."""

    indexed_count: int
    source_count: int
    pending: int
    chunks: int
    compatible: bool
    dirty: bool
    graph: bool
    graph_file: str  # present, missing, damaged, rebuilding, unsaved or none
    graph_file_error: str | None  # with unsaved: the error code writing the file failed with (storage_full, ...)
    graph_rebuild: dict[str, str] | None  # why and when the graph was last rebuilt: {reason, at}


@dataclass(frozen=True)
class IndexTotals(JsonResult):
    """What one ``index`` run did."""

    memories: int
    chunks_embedded: int
    chunks_reused: int
    remaining: int
    busy: bool
    neighbours_rewritten: int
    reset: bool


@dataclass(frozen=True)
class IndexReport(JsonResult):
    """``index``: the run's totals and the index status after it, published as one flat document."""

    totals: IndexTotals
    status: IndexStatus

    def to_dict(self) -> dict[str, Any]:
        return self.totals.to_dict() | self.status.to_dict()


# -- jobs and projects ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobCounts(JsonResult):
    queued: int
    running: int
    done: int
    failed: int


@dataclass(frozen=True)
class JobRow(JsonResult):
    id: int
    kind: str
    order_key: str
    state: str
    attempts: int
    max_attempts: int
    run_after: float | None
    lease_expires: float | None
    last_error: str | None
    created_at: str
    updated_at: str
    finished_at: str | None


@dataclass(frozen=True)
class JobList(JsonResult):
    """``jobs``: counts by state and the newest jobs."""

    counts: JobCounts
    jobs: tuple[JobRow, ...]


@dataclass(frozen=True)
class NoteCounts(JsonResult):
    """Notes of the project tier by status."""

    candidate: int
    trusted: int
    superseded: int
    forgotten: int


@dataclass(frozen=True)
class JudgmentCounts(JsonResult):
    """Judgments of the project tier by state (``escalated``: waiting for a person)."""

    open: int
    escalated: int
    resolved: int


@dataclass(frozen=True)
class JudgeError(JsonResult):
    """The latest judge call that failed (recorded as an escalation): its code and message, never text."""

    error: str
    at: str
    judgment_id: str


@dataclass(frozen=True)
class TrustStatus(JsonResult):
    """Agent-written notes and their judgments (docs/trust.md)."""

    notes: NoteCounts
    judgments: JudgmentCounts
    last_judge_error: JudgeError | None


@dataclass(frozen=True)
class ProjectStatus(JsonResult):
    """``status``: a project's size, activity, pipeline and (semantic mode) index."""

    project: str
    sessions: int
    events: int
    observations: int
    reflections: int
    last_activity: str | None
    database_bytes: int
    wal_bytes: int
    mode: str
    dropped_observations: int
    generations: int
    observer: str
    reflector: str
    jobs: JobCounts
    # Events above the conversation index's watermark: exact conversation search and recall scan them
    # directly until a catch-up (housekeeping, the CLI after a write, `obsmem index`) indexes them.
    unindexed_events: int
    indexed_count: int | None = field(default=None, metadata=OMIT_IF_NONE)
    source_count: int | None = field(default=None, metadata=OMIT_IF_NONE)
    index: IndexStatus | None = field(default=None, metadata=OMIT_IF_NONE)
    trust: TrustStatus | None = field(default=None, metadata=OMIT_IF_NONE)


# -- sessions and the pipeline ----------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationInfo(JsonResult):
    """The session's active (promoted) generation."""

    number: int
    id: str
    generation_id: str
    promoted_at: str
    reflections_added: int
    observations_dropped: int
    observation_tokens_before: int
    observation_tokens_after: int


@dataclass(frozen=True)
class PoolPressure(JsonResult):
    """The active pool against its limits, and the observations in each coverage tier."""

    observations: int
    observation_tokens: int
    observations_max_tokens: int
    pool_percent: float
    reflection_threshold: int
    reflection_percent: float
    reflections: int
    reflection_tokens: int
    dropped_observations: int
    coverage: dict[str, int]


@dataclass(frozen=True)
class CurrentActivity(JsonResult):
    stage: str
    tokens: int
    running_seconds: float
    job_id: int


@dataclass(frozen=True)
class LastError(JsonResult):
    type: str
    code: str
    message: str
    at: str


@dataclass(frozen=True)
class SessionJobs(JsonResult):
    queued: int
    running: int


@dataclass(frozen=True)
class BufferedObservations(JsonResult):
    """Observation done in the background and not yet replacing messages (Mastra's buffered chunks)."""

    status: str  # running | pending | idle
    chunks: int
    message_tokens: int
    projected_message_removal: int
    observation_tokens: int


@dataclass(frozen=True)
class BufferedReflection(JsonResult):
    status: str  # running | due | idle
    input_observation_tokens: int
    observation_tokens: int


@dataclass(frozen=True)
class BufferedProgress(JsonResult):
    observations: BufferedObservations
    reflection: BufferedReflection


@dataclass(frozen=True)
class SessionStatus(JsonResult):
    """``session_status``: the progress state of one session (docs/pipeline.md lists every field)."""

    session_id: str
    status: str
    pending_tokens: int
    threshold: int
    threshold_percent: float
    observation_threshold: int
    observation_tokens: int
    reflection_threshold: int
    generation_count: int
    current_activity: CurrentActivity | None
    last_error: LastError | None
    pending_events: int
    observed_through_seq: int
    last_seq: int
    observer: str
    reflector: str
    generation: GenerationInfo | None
    pool: PoolPressure
    jobs: SessionJobs
    buffered: BufferedProgress
    step_number: int
    pre_reflection_tokens: int


@dataclass(frozen=True)
class ReflectionDetail(JsonResult):
    id: str
    memory_id: str
    timestamp: str
    generation: int | None
    content: str
    supporting_observation_ids: tuple[str, ...]
    retired_support: int


@dataclass(frozen=True)
class ObservationDetail(JsonResult):
    id: str
    memory_id: str
    timestamp: str
    importance: str
    coverage: str
    citations: int
    source_seqs: tuple[int, ...]
    content: str


@dataclass(frozen=True)
class MemoryDetails(JsonResult):
    """``memory_details``: the active memory for inspection."""

    session_id: str
    generation_count: int
    generation: GenerationInfo | None
    pool: PoolPressure
    reflections: tuple[ReflectionDetail, ...]
    observations: tuple[ObservationDetail, ...]


@dataclass(frozen=True)
class RoleModelChoice(JsonResult):
    """The model one role's next job uses, and whether it comes from the settings or an override."""

    model_id: str
    context_window_tokens: int
    source: str
    updated_at: str | None


@dataclass(frozen=True)
class ModelChoices(JsonResult):
    """``models``: each role's model."""

    models: dict[str, RoleModelChoice]


@dataclass(frozen=True)
class ModelSwitch(JsonResult):
    """``switch_models``: each role's model after the switch, and the roles that changed."""

    models: dict[str, RoleModelChoice]
    changed: tuple[str, ...]
