"""Errors with stable, machine-readable codes.

Every error a user can cause, or a configured dependency can produce, is an :class:`ObsmemError` with a
``code`` that never changes between releases. The surfaces map them once: HTTP turns ``status`` and
``code`` into ``{"error": {"code", "message"}}``; the agent tools and MCP return ``"<code>: <message>"``;
the CLI prints the message and exits non-zero.

Messages name the offending field and what is allowed. They never quote memory text, queries, keys or
response bodies, so they are safe to log. A message that tells the caller what to pass names the argument
(or operation) with :func:`interface_name`: ``message`` spells it as the HTTP API and the agent tools do,
and a surface that spells it otherwise renders :meth:`ObsmemError.message_for` (the CLI: ``--session`` for
``session_id``).

    ObsmemError (400)                 error: the base, never raised as such
    ├── ValidationFailed (422)        invalid_request; given where raised: mode_unavailable (hybrid mode
    │   │                             without a [semantic] section), unknown_source_ref (an observation
    │   │                             citing events that do not exist), unknown_observation (a reflection
    │   │                             citing observations that do not exist), user_tier_unavailable (a
    │   │                             user-tier note for an API key with no owner), invalid_hook_payload
    │   │                             (`obsmem hook`: stdin is not a hook payload naming a transcript)
    │   ├── InvalidQuery              invalid_query
    │   ├── InvalidDate               invalid_date
    │   ├── InvalidId                 invalid_id
    │   ├── InvalidProject            invalid_project
    │   ├── InvalidSession            invalid_session
    │   ├── InvalidScope              invalid_scope: a search scope other than memories, conversation, all
    │   ├── InvalidArguments          invalid_arguments: a tool call's arguments (agent tools and MCP only)
    │   ├── UnknownTool               unknown_tool: a tool that does not exist (agent tools and MCP only)
    │   ├── ExportInvalid             export_invalid: a project export file that is not one, or breaks its rules
    │   │   ├── ExportTruncated       export_truncated: the file ends before its trailer (cut short)
    │   │   └── ExportChecksumMismatch  export_checksum_mismatch: the records are not the ones written
    │   └── ExportVersionUnsupported  export_version_unsupported: written by a newer obsmem's format
    ├── AmbiguousId (422)             ambiguous_id
    ├── NotFound (404)                not_found; given where raised: session_not_found
    │   └── ProjectNotFound           project_not_found
    ├── SeqConflict (409)             seq_conflict
    ├── ProjectNotEmpty (409)         project_not_empty: a restore into a project that already holds data
    ├── ObservationOff (409)          observation_off: observation asked for, but no model or switched off
    ├── ReflectionOff (409)           reflection_off: reflection asked for, but no model or switched off
    ├── SemanticSettingsMismatch (409)  semantic_settings_mismatch: the semantic index was built with other
    │                                 [semantic] settings than this process's; `obsmem index PROJECT` adopts them
    ├── Unauthorized (401)            unauthorized
    ├── Forbidden (403)               forbidden
    ├── PayloadTooLarge (413)         payload_too_large
    ├── ConfigurationError (500)      configuration_error: start-up only, nothing is served
    ├── ExportIncomplete (500)        export_unknown_table: the database holds a table no export rule covers
    ├── StorageError (503)            storage_error: the database cannot be used (see obsmem.storage)
    │   ├── StorageFull               storage_full (Retry-After): the disk is full
    │   ├── StorageReadOnly           storage_read_only: the data directory cannot be written
    │   ├── StorageIOError            storage_io_error (Retry-After): the OS reported an I/O error
    │   ├── StorageBusy               storage_busy (Retry-After): the write lock was held beyond the timeout
    │   └── StorageCorrupt            storage_corrupt: the file is damaged or not a database
    ├── NotOnPostgres (501)           not_on_postgres: asked of the PostgreSQL backend, which lacks it yet
    ├── ServiceUnavailable (503)      service_unavailable: a configured dependency cannot answer
    │   ├── EmbeddingUnavailable      embedding_unavailable
    │   ├── RerankerUnavailable       reranker_unavailable
    │   ├── IndexBuilding             index_building (with indexed_count and source_count)
    │   ├── IndexBusy                 index_busy
    │   ├── ModelUnavailable          model_unavailable
    │   ├── ModelNotConfigured        model_not_configured
    │   ├── ModelTimeout (504)        model_timeout
    │   ├── ModelRejected (502)       model_rejected: the endpoint refused the request (4xx)
    │   ├── ModelRefused (502)        model_refused: the endpoint's content filter withheld the reply
    │   └── ModelBadResponse (502)    model_bad_response: not an OpenAI-compatible reply
    │
    │   Defined beside the code that raises them. They end one attempt of a background job and reach
    │   people only as its failure reason (a session's last_error, a job_failed event):
    ├── LeaseLost (409)               lease_lost (obsmem.work): a worker lost its job and must not commit
    ├── CoverageConflict (409)        coverage_conflict (the observe wing): part of a chunk was covered
    │                                 meanwhile; the chunk is re-packed
    ├── GenerationLost (409)          generation_lost (the reflect wing): another attempt took the claim
    ├── LedgerError (500)             ledger_invalid (the reflect wing): a session's generations are not
    │                                 one chain (a bug if seen)
    │
    │   Defined in obsmem.trust (docs/trust.md):
    ├── NoteForgotten (409)           note_forgotten: a forgotten note cannot be updated
    ├── NoteSuperseded (409)          note_superseded: a superseded note cannot be updated (update its successor)
    ├── JudgmentResolved (409)        judgment_resolved: a judgment resolved one way cannot be resolved the other
    └── JudgeFailed (503)             judge_unavailable: the judge gave no answer; recorded as an escalation
        ├── JudgeTimeout              judge_timeout: the judge did not answer within its deadline
        ├── JudgeBadResponse (502)    judge_bad_response: no p, not JSON, or p outside [0, 1]
        └── JudgeCrashed (500)        judge_error: the judge or the judging job failed unexpectedly (only
                                      the exception's type is kept)

Codes without an error class, in the same ``{"error": {"code", "message"}}`` shape:

    internal_error (500)        a bug: the HTTP server answers it with no detail (the log has it); a
                                background job records ``internal_error: <type>`` as its failure reason
    invalid_http (400)          HTTP: the request is not valid HTTP/1.1; the connection closes
    not_found (404)             HTTP: no such route
    method_not_allowed (405)    HTTP: the route exists with other methods (an Allow header lists them)
    request_timeout (408)       HTTP: the request head or body did not arrive in time; the connection closes
    rate_limited (429)          HTTP: too many failed authentications from one address (Retry-After)
    over_capacity (503)         HTTP: the connection or in-flight request cap is reached (Retry-After)
    too_many_streams (503)      HTTP: the cap on open event streams is reached (Retry-After)
    http_error (4xx)            HTTP: any other refusal of the web framework, with its status
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Marks a name of the request interface inside a message; no identifier, id or number a message holds has it.
_MARK = "\x1f"


def interface_name(name: str) -> str:
    """``name``, an argument or operation of the HTTP API and the agent tools (``session_id``,
    ``memory_search``), marked inside an error message so that each surface can spell it its own way."""
    return f"{_MARK}{name}{_MARK}"


def _spelt(marked: str, spelling: Mapping[str, str]) -> str:
    parts = marked.split(_MARK)  # the odd parts are the marked names
    return "".join(spelling.get(part, part) if index % 2 else part for index, part in enumerate(parts))


class ObsmemError(Exception):
    """Base class: a problem with a stable code and a safe message."""

    code: str = "error"
    status: int = 400
    retryable: bool = True  # for background jobs: may another attempt succeed?
    retry_after: int | None = None  # seconds a client should wait before retrying (HTTP Retry-After)

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self._marked = message
        self.message = _spelt(message, {})
        super().__init__(self.message)
        if code is not None:
            self.code = code
        self.field = field
        self.details = details or {}

    def message_for(self, spelling: Mapping[str, str]) -> str:
        """The message with each name marked by :func:`interface_name` spelt as ``spelling`` says (a name
        it leaves out as in :attr:`message`)."""
        return _spelt(self._marked, spelling)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        body.update(self.details)
        return body


class ValidationFailed(ObsmemError):
    """A request field has a value that is not allowed."""

    code = "invalid_request"
    status = 422


class InvalidQuery(ValidationFailed):
    code = "invalid_query"


class InvalidDate(ValidationFailed):
    code = "invalid_date"


class InvalidId(ValidationFailed):
    code = "invalid_id"


class InvalidProject(ValidationFailed):
    code = "invalid_project"


class InvalidSession(ValidationFailed):
    code = "invalid_session"


class InvalidScope(ValidationFailed):
    code = "invalid_scope"


class AmbiguousId(ObsmemError):
    code = "ambiguous_id"
    status = 422


class NotFound(ObsmemError):
    code = "not_found"
    status = 404


class ProjectNotFound(NotFound):
    code = "project_not_found"


class SeqConflict(ObsmemError):
    code = "seq_conflict"
    status = 409


class Unauthorized(ObsmemError):
    code = "unauthorized"
    status = 401


class Forbidden(ObsmemError):
    code = "forbidden"
    status = 403


class PayloadTooLarge(ObsmemError):
    code = "payload_too_large"
    status = 413


class ConfigurationError(ObsmemError):
    """The settings cannot work; raised at start-up, before anything is served."""

    code = "configuration_error"
    status = 500
    retryable = False


class NotOnPostgres(ObsmemError):
    """Asked of the PostgreSQL backend, which does not implement it yet (docs/postgres.md lists what it does);
    the message names what is missing. Never answered by falling back to something else."""

    code = "not_on_postgres"
    status = 501
    retryable = False


class ServiceUnavailable(ObsmemError):
    """A configured dependency (model endpoint, index) cannot answer right now."""

    code = "service_unavailable"
    status = 503


class EmbeddingUnavailable(ServiceUnavailable):
    """The configured embedding model or endpoint did not give usable vectors."""

    code = "embedding_unavailable"


class RerankerUnavailable(ServiceUnavailable):
    """The configured reranker did not give usable scores; search never skips it silently."""

    code = "reranker_unavailable"


class IndexBuilding(ServiceUnavailable):
    """The semantic index has nothing usable yet; ``details`` carries ``indexed_count`` and ``source_count``."""

    code = "index_building"

    def __init__(self, message: str, *, indexed_count: int, source_count: int) -> None:
        super().__init__(message, details={"indexed_count": indexed_count, "source_count": source_count})
        self.indexed_count = indexed_count
        self.source_count = source_count


class IndexBusy(ServiceUnavailable):
    """The semantic index is being loaded or swapped and could not answer within the wait bound."""

    code = "index_busy"


class StorageError(ObsmemError):
    """The database could not be opened or is not what obsmem expects."""

    code = "storage_error"
    status = 503


class StorageFull(StorageError):
    """The disk (or quota) of the data directory is full; writes succeed again once space is freed."""

    code = "storage_full"
    retry_after = 30


class StorageReadOnly(StorageError):
    """The data directory or database cannot be written (read-only mount, permissions); reads still work."""

    code = "storage_read_only"
    retryable = False


class StorageIOError(StorageError):
    """The operating system reported an I/O error reading or writing the database."""

    code = "storage_io_error"
    retry_after = 5


class StorageBusy(StorageError):
    """Another writer held the database lock for longer than the busy timeout."""

    code = "storage_busy"
    retry_after = 1


class StorageCorrupt(StorageError):
    """The database file is damaged or is not a SQLite database; restore it from a backup."""

    code = "storage_corrupt"
    retryable = False


class InvalidArguments(ValidationFailed):
    """An agent tool call whose arguments are not a JSON object of that tool's parameters."""

    code = "invalid_arguments"


class UnknownTool(ValidationFailed):
    """An agent tool call naming a tool that does not exist."""

    code = "unknown_tool"


class ObservationOff(ObsmemError):
    """Observation was asked for, but this server observes nothing (no model configured, or switched off)."""

    code = "observation_off"
    status = 409
    retryable = False


class ReflectionOff(ObsmemError):
    """Reflection was asked for, but this server reflects on nothing (no model configured, or switched off)."""

    code = "reflection_off"
    status = 409
    retryable = False


class ModelUnavailable(ServiceUnavailable):
    """The chat model endpoint could not be reached or kept failing (after retries)."""

    code = "model_unavailable"


class ModelNotConfigured(ServiceUnavailable):
    """No model endpoint is configured for a role that needs one."""

    code = "model_not_configured"
    retryable = False


class ModelTimeout(ServiceUnavailable):
    """The chat model did not finish answering within the call's overall deadline."""

    code = "model_timeout"
    status = 504


class ModelRejected(ServiceUnavailable):
    """The chat model endpoint refused the request (HTTP 4xx other than 429, or a redirect)."""

    code = "model_rejected"
    status = 502


class ModelRefused(ServiceUnavailable):
    """The chat model endpoint withheld the model's reply (``finish_reason: "content_filter"``). Nothing the
    stage's run recorded is kept, and the attempt is retried like any other model failure."""

    code = "model_refused"
    status = 502


class ModelBadResponse(ServiceUnavailable):
    """The chat model endpoint answered with something that is not an OpenAI-compatible reply."""

    code = "model_bad_response"
    status = 502


class ExportInvalid(ValidationFailed):
    """A project export file that is not one, or whose records break the format's or the schema's rules."""

    code = "export_invalid"


class ExportTruncated(ExportInvalid):
    """A project export file that ends before its trailer: it was cut short, so nothing of it is restored."""

    code = "export_truncated"


class ExportChecksumMismatch(ExportInvalid):
    """A project export file whose records do not hash to the checksum its trailer recorded."""

    code = "export_checksum_mismatch"


class ExportVersionUnsupported(ValidationFailed):
    """A project export file written in a newer format version than this obsmem reads: upgrade obsmem."""

    code = "export_version_unsupported"


class ProjectNotEmpty(ObsmemError):
    """A restore names a project that already holds data; a restore only fills a new (or empty) project."""

    code = "project_not_empty"
    status = 409


class SemanticSettingsMismatch(ObsmemError):
    """The project's semantic index was built with other ``[semantic]`` settings (embedding model, chunking,
    keyword documents) than this process's. Only an explicit ``obsmem index PROJECT`` replaces an index built
    with other settings: a background indexer that did so would start a fight with every process still
    running with the settings the index was built with (docs/semantic.md, Settings changes)."""

    code = "semantic_settings_mismatch"
    status = 409
    retryable = False


class ExportIncomplete(ObsmemError):
    """The database holds a table that no export rule covers (neither exported nor declared derived), or
    lacks one the rules name, so an export would silently drop data: a bug of this obsmem version, refused
    before anything is written."""

    code = "export_unknown_table"
    status = 500
    retryable = False
