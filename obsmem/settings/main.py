"""The settings model: every section but `[semantic]` (its own module), and where each value may come from.

Values come, highest first, from code (the CLI's flags), ``OBSMEM_*`` environment variables (nested
sections with ``__``, e.g. ``OBSMEM_SERVER__PORT=9000``), the settings file, the defaults below; which
file is read is decided in :mod:`obsmem.settings.loading`. Every field is documented in
docs/configuration.md; a test keeps the two in step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, SecretStr, create_model, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from obsmem.redaction import secret_kind
from obsmem.settings.base import Section, check_base_url
from obsmem.settings.semantic import SemanticSettings
from obsmem.settings.storage import StorageSettings
from obsmem.settings.transcripts import TranscriptSettings
from obsmem.settings.trust import TrustSettings
from obsmem.validation import PROJECT_SLUG

ENV_PREFIX = "OBSMEM_"
ALL_PROJECTS = "*"
# Shorter keys can be guessed by an online search well within a key's lifetime.
MIN_API_KEY_CHARS = 16


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/obsmem``, else ``~/.local/share/obsmem``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "obsmem"


class ApiKey(Section):
    """One bearer key and the projects it may use."""

    key: SecretStr = Field(description="The secret sent as `Authorization: Bearer <key>`.")
    name: str = Field(default="", description="A label for logs (the key itself is never logged).")
    projects: list[str] = Field(
        default_factory=lambda: [ALL_PROJECTS],
        description='Project slugs this key may read and write; `["*"]` means every project.',
    )
    owner: str = Field(
        default="",
        description="Whose user-tier notes this key reaches (a slug); empty: the key's `name`, if that is a slug.",
    )

    @field_validator("key")
    @classmethod
    def _usable_key(cls, value: SecretStr) -> SecretStr:
        # Messages describe the problem, never the key: settings errors are printed and logged.
        secret = value.get_secret_value()
        if not secret.strip():
            raise ValueError("is blank")
        if any(char.isspace() or not char.isprintable() for char in secret):
            raise ValueError("must not contain spaces or control characters (it is sent in an HTTP header)")
        if len(secret) < MIN_API_KEY_CHARS:
            raise ValueError(f"API keys must be at least {MIN_API_KEY_CHARS} characters")
        return value

    @field_validator("projects")
    @classmethod
    def _project_slugs(cls, value: list[str]) -> list[str]:
        for position, name in enumerate(value):
            if name != ALL_PROJECTS and not PROJECT_SLUG.fullmatch(name):
                raise ValueError(
                    f"entry {position} is neither '*' nor a project name (1-64 characters of a-z, 0-9, '.', '_' "
                    "or '-', starting with a letter or digit)"
                )
            # A slug shaped like a credential is refused at every door, so such an entry could never be used.
            kind = None if name == ALL_PROJECTS else secret_kind(name)
            if kind is not None:
                raise ValueError(
                    f"entry {position} looks like a secret ({kind}), which is never accepted as a project name"
                )
        return value

    @field_validator("owner")
    @classmethod
    def _owner_slug(cls, value: str) -> str:
        if value and not PROJECT_SLUG.fullmatch(value):
            raise ValueError("must be 1-64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit")
        return value

    def allows(self, project: str) -> bool:
        return ALL_PROJECTS in self.projects or project in self.projects

    @property
    def user(self) -> str | None:
        """The owner whose user-tier notes this key reaches, or None when neither owner nor name is a slug."""
        if self.owner:
            return self.owner
        return self.name if PROJECT_SLUG.fullmatch(self.name) else None


class ServerSettings(Section):
    """`obsmem serve`."""

    host: str = Field(default="127.0.0.1", description="Interface to bind. Non-loopback needs API keys.")
    port: int = Field(default=8765, ge=0, le=65535, description="TCP port.")
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 above it)."
    )
    mcp: bool = Field(default=True, description="Serve the MCP endpoint (streamable HTTP) under `/mcp`.")
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Without API keys, Host names accepted besides loopback ones (e.g. behind a local proxy).",
    )
    access_log: bool = Field(default=True, description="Log one line per request (method, path, status).")
    # Connection hygiene: every way a client can hold a connection or a worker has a bound.
    keep_alive_seconds: float = Field(
        default=5.0, gt=0, le=3600, description="An idle connection (before its first request or between two) closes."
    )
    header_timeout_seconds: float = Field(
        default=10.0, gt=0, le=3600, description="A started request's line and headers must arrive within this (408)."
    )
    body_timeout_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="A request body must arrive whole within this (408 request_timeout)."
    )
    max_connections: int = Field(
        default=512, ge=1, le=1_000_000, description="Open connections; a request beyond them gets 503 over_capacity."
    )
    max_in_flight: int = Field(
        default=128,
        ge=1,
        le=100_000,
        description="Requests served at once (streams included); 503 over_capacity beyond.",
    )
    auth_failures_per_minute: int = Field(
        default=30, ge=1, le=100_000, description="Failed authentications per client address before 429 rate_limited."
    )
    stream_idle_seconds: float = Field(
        default=300.0, gt=0, le=86_400, description="An event stream (SSE, MCP GET) with no message this long ends."
    )
    max_stream_followers: int = Field(
        default=16,
        ge=1,
        le=10_000,
        description="Event streams open at once (fewer than max_in_flight); one more gets 503 too_many_streams.",
    )

    @model_validator(mode="after")
    def _streams_fit_in_flight(self) -> ServerSettings:
        # A stream is an in-flight request for its whole life: as many followers as requests would let open
        # streams take every slot, and every other request (health checks included) would get 503.
        if self.max_stream_followers >= self.max_in_flight:
            raise ValueError("max_stream_followers must be smaller than max_in_flight")
        return self


class SearchSettings(Section):
    """`memory_search` limits."""

    default_limit: int = Field(default=20, ge=1, le=50, description="Hits returned when no limit is given.")
    max_limit: int = Field(default=50, ge=1, le=50, description="Largest `limit` a caller may ask for.")
    recall_neighbours: int = Field(
        default=3,
        ge=0,
        le=50,
        description="`recall` of a conversation event: how many events before it and after it in its session "
        "come with it.",
    )

    @model_validator(mode="after")
    def _default_within_max(self) -> SearchSettings:
        # Otherwise a search without a limit would return more hits than any caller may ask for.
        if self.default_limit > self.max_limit:
            raise ValueError("default_limit must not be larger than max_limit")
        return self


class ModelSettings(Section):
    """`[model]`: the OpenAI-compatible chat-completions endpoint shared by Observer, Reflector and Dropper."""

    base_url: str | None = Field(
        default=None,
        description="Endpoint base URL ending before `/chat/completions`, e.g. `http://127.0.0.1:8080/v1`. "
        "Unset: no model, so no background observation.",
    )
    model_id: str | None = Field(default=None, description="The `model` sent with every request.")
    api_key: SecretStr | None = Field(
        default=None, description="Sent only as `Authorization: Bearer <key>`; never logged."
    )
    timeout_seconds: float = Field(
        default=120.0, gt=0, le=3600, description="Overall deadline of one call, retries and body included."
    )
    max_retries: int = Field(
        default=2, ge=0, le=10, description="Extra tries after HTTP 429, 5xx or a connection failure."
    )
    retry_backoff_seconds: float = Field(
        default=1.0, ge=0, le=60, description="First retry delay; doubled per retry (Retry-After wins)."
    )
    context_window_tokens: int = Field(
        default=32_768, ge=2048, le=10_000_000, description="The model's context window, in tokens."
    )
    temperature: float | None = Field(
        default=0.0, ge=0, le=2, description="Sampling temperature; unset sends none (provider default)."
    )
    max_output_tokens: int | None = Field(default=4096, ge=16, description="`max_tokens` per reply; unset sends none.")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return _model_base_url(value)


def _model_base_url(value: str | None) -> str | None:
    return check_base_url(value, key_hint="set api_key instead")


class ModelOverrideBase(Section):
    """What a role's overrides do; their fields are derived from :class:`ModelSettings` below."""

    @field_validator("base_url", check_fields=False)
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return _model_base_url(value)

    def apply_to(self, shared: ModelSettings) -> ModelSettings:
        changes = self.model_dump(exclude_none=True)
        return shared.model_copy(update=changes) if changes else shared


def _override_fields(settings: type[BaseModel]) -> dict[str, Any]:
    """Every field of ``settings`` as an optional override: same type and bounds, unset by default.

    Derived rather than written out, so a new `[model]` setting can be overridden per role at once.
    """
    fields: dict[str, Any] = {}
    for name, field in settings.model_fields.items():
        declared: Any = field.annotation  # a runtime type here, never None: every field is annotated
        optional = declared | None
        annotation = Annotated[optional, *field.metadata] if field.metadata else optional
        fields[name] = (annotation, Field(default=None, description=f"Overrides `model.{name}` for this role."))
    return fields


if TYPE_CHECKING:
    # Type checkers cannot run create_model, so they read this declaration of the same fields (each the
    # `ModelSettings` type, optional); tests/test_settings.py keeps it equal to the generated model.

    class ModelOverride(ModelOverrideBase):
        base_url: str | None = None
        model_id: str | None = None
        api_key: SecretStr | None = None
        timeout_seconds: float | None = None
        max_retries: int | None = None
        retry_backoff_seconds: float | None = None
        context_window_tokens: int | None = None
        temperature: float | None = None
        max_output_tokens: int | None = None

else:
    ModelOverride = create_model(
        "ModelOverride",
        __base__=ModelOverrideBase,
        __module__=__name__,
        __doc__="`[observer.model]`, `[reflector.model]`, `[dropper.model]`: fields that differ from `[model]`.",
        **_override_fields(ModelSettings),
    )


class ObserverSettings(Section):
    """`[observer]`: background observation of conversation events."""

    enabled: bool = Field(
        default=True, description="Observe in the background (needs `[model]`). False: events are only stored."
    )
    buffer_tokens: int = Field(
        default=6000, ge=1, description="Unobserved tokens in a session that start a background observation."
    )
    observation_threshold: int = Field(
        default=30_000, ge=1, description="Where an agent compacts its context; reported in the status."
    )
    context_window_ratio: float = Field(
        default=0.65, gt=0.05, le=0.95, description="Share of the model's context window one request may fill."
    )
    memory_share: float = Field(
        default=0.25, ge=0, le=0.8, description="Share of that envelope for existing memory shown for context."
    )
    max_tool_rounds: int = Field(
        default=6, ge=1, le=32, description="Model replies per chunk (first try plus correction rounds)."
    )
    max_chunks_per_job: int = Field(
        default=8, ge=1, le=1000, description="Chunks one job observes before it queues a continuation."
    )
    max_observation_chars: int = Field(
        default=1000, ge=40, le=4000, description="Longest observation accepted (longer ones are sent back)."
    )
    resume_after_failure_seconds: float = Field(
        default=600,
        ge=0,
        description="Housekeeping retries a session over the buffer this long after a failed observe job.",
    )
    model: ModelOverride = Field(default_factory=ModelOverride)


class ReflectorSettings(Section):
    """`[reflector]`: condensing observations into reflections."""

    enabled: bool = Field(
        default=True, description="Reflect (and drop) in the background when the threshold is passed (needs `[model]`)."
    )
    reflect_after_observation_tokens: int = Field(
        default=40_000, ge=1, description="Active observation tokens above which a reflection is due."
    )
    max_tool_rounds: int = Field(
        default=16, ge=1, le=64, description="Model replies per Reflector run (first try plus correction rounds)."
    )
    max_reflection_chars: int = Field(
        default=1000, ge=40, le=4000, description="Longest reflection accepted (longer ones are sent back)."
    )
    max_supporting_ids: int = Field(
        default=100, ge=1, le=500, description="Most supporting observation ids one reflection may cite."
    )
    context_window_ratio: float = Field(
        default=0.65, gt=0.05, le=0.95, description="Share of the model's context window one request may fill."
    )
    reflection_share: float = Field(
        default=0.3, ge=0, le=0.8, description="Share of that envelope for existing reflections shown for context."
    )
    resume_after_failure_seconds: float = Field(
        default=600, ge=0, description="Housekeeping retries a session over the threshold this long after a failure."
    )
    model: ModelOverride = Field(default_factory=ModelOverride)


class DropperSettings(Section):
    """`[dropper]`: retiring observations that reflections cover."""

    max_tool_rounds: int = Field(
        default=16, ge=1, le=64, description="Model replies per Dropper run (first try plus correction rounds)."
    )
    context_window_ratio: float = Field(
        default=0.65, gt=0.05, le=0.95, description="Share of the model's context window one request may fill."
    )
    model: ModelOverride = Field(default_factory=ModelOverride)


class PoolSettings(Section):
    """`[pools]`: how large the active memory may grow."""

    observations_max_tokens: int = Field(
        default=30_000,
        ge=1,
        description="Target for the active observations: after new reflections, the Dropper retires covered "
        "observations until the pool is back under it.",
    )


class JobSettings(Section):
    """`[jobs]`: the durable job queue and its workers."""

    max_retries: int = Field(default=3, ge=0, le=20, description="Retries after a failed attempt (3 = 4 attempts).")
    retry_backoff_seconds: float = Field(
        default=5.0, ge=0, le=3600, description="Delay before the first retry; doubled per retry, capped at 15 min."
    )
    lease_seconds: float = Field(
        default=60.0, ge=0.5, le=3600, description="How long a claimed job stays owned without a heartbeat."
    )
    poll_seconds: float = Field(default=1.0, gt=0, le=60, description="Idle workers look for work this often.")
    worker_threads: int = Field(default=1, ge=1, le=32, description="Jobs run at once per worker process.")
    housekeeping_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="Interval of lease reaping, stale-activity clearing, resuming."
    )
    stale_activity_seconds: float = Field(
        default=300.0, gt=0, description="Current-activity rows older than this are hidden and cleared."
    )
    keep_finished_days: float = Field(
        default=7.0, ge=0, description="Finished jobs are deleted after this many days (failed ones after 4x)."
    )
    in_server: bool = Field(default=True, description="`obsmem serve` runs workers in the server process.")


class Settings(BaseSettings):
    """All obsmem settings."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Where project databases live (one SQLite file per project).",
    )
    api_keys: list[ApiKey] = Field(
        default_factory=list,
        description="Bearer keys for the HTTP API. With none, the server only binds to loopback.",
    )
    storage: StorageSettings = Field(default_factory=StorageSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    observer: ObserverSettings = Field(default_factory=ObserverSettings)
    reflector: ReflectorSettings = Field(default_factory=ReflectorSettings)
    dropper: DropperSettings = Field(default_factory=DropperSettings)
    pools: PoolSettings = Field(default_factory=PoolSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    trust: TrustSettings = Field(default_factory=TrustSettings)
    transcripts: TranscriptSettings = Field(default_factory=TranscriptSettings)
    semantic: SemanticSettings | None = Field(
        default=None,
        description="Hybrid search (see [semantic]). Absent: nothing is indexed and search is exact.",
    )

    @field_validator("api_keys")
    @classmethod
    def _distinct_keys(cls, value: list[ApiKey]) -> list[ApiKey]:
        # Two entries with one key would leave the second's projects silently unused: refuse it, naming
        # the entries by position and label (never the key).
        first_seen: dict[str, int] = {}
        for position, entry in enumerate(value):
            earlier = first_seen.setdefault(entry.key.get_secret_value(), position)
            if earlier != position:
                raise ValueError(
                    f"entries {earlier} ({value[earlier].name or 'unnamed'}) and {position} "
                    f"({entry.name or 'unnamed'}) hold the same key; give each entry its own key"
                )
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # ``toml_file`` is set per load by load_settings(); None reads no file.
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)

    def model_for(self, role: str) -> ModelSettings:
        """The shared `[model]` with the role's overrides (`observer`, `reflector` or `dropper`) applied."""
        sections: dict[str, ObserverSettings | ReflectorSettings | DropperSettings] = {
            "observer": self.observer,
            "reflector": self.reflector,
            "dropper": self.dropper,
        }
        if role not in sections:
            raise ValueError(f"unknown model role {role!r}")
        return sections[role].model.apply_to(self.model)

    @property
    def semantic_enabled(self) -> bool:
        return self.semantic is not None and self.semantic.enabled
