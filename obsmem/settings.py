"""Settings: one model, read from a TOML file and overridden by the environment.

Precedence, highest first: values passed in code (the CLI's flags), ``OBSMEM_*`` environment variables
(nested sections with ``__``, e.g. ``OBSMEM_SERVER__PORT=9000``), the settings file, the defaults below.
The settings file is ``--config`` / ``OBSMEM_CONFIG``, else ``obsmem.toml`` in the data directory when
it exists. Every field is documented in docs/configuration.md; a test keeps the two in step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from obsmem.errors import ConfigurationError
from obsmem.settings_semantic import SemanticSettings

ENV_PREFIX = "OBSMEM_"
CONFIG_ENV = "OBSMEM_CONFIG"
DATA_DIR_ENV = "OBSMEM_DATA_DIR"
ALL_PROJECTS = "*"


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/obsmem``, else ``~/.local/share/obsmem``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "obsmem"


class Section(BaseModel):
    """A settings section: unknown keys are errors, so a typo never silently does nothing."""

    model_config = ConfigDict(extra="forbid")


class ApiKey(Section):
    """One bearer key and the projects it may use."""

    key: SecretStr = Field(description="The secret sent as `Authorization: Bearer <key>`.")
    name: str = Field(default="", description="A label for logs (the key itself is never logged).")
    projects: list[str] = Field(
        default_factory=lambda: [ALL_PROJECTS],
        description='Project slugs this key may read and write; `["*"]` means every project.',
    )

    @field_validator("key")
    @classmethod
    def _long_enough(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < 16:
            raise ValueError("API keys must be at least 16 characters")
        return value

    def allows(self, project: str) -> bool:
        return ALL_PROJECTS in self.projects or project in self.projects


class ServerSettings(Section):
    """`obsmem serve`."""

    host: str = Field(default="127.0.0.1", description="Interface to bind. Non-loopback needs API keys.")
    port: int = Field(default=8765, ge=0, le=65535, description="TCP port.")
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 above it)."
    )
    mcp: bool = Field(default=True, description="Serve the MCP endpoint (streamable HTTP) under `/mcp`.")


class SearchSettings(Section):
    """`memory_search` limits."""

    default_limit: int = Field(default=20, ge=1, le=50, description="Hits returned when no limit is given.")
    max_limit: int = Field(default=50, ge=1, le=50, description="Largest `limit` a caller may ask for.")


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
    server: ServerSettings = Field(default_factory=ServerSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    semantic: SemanticSettings | None = Field(
        default=None,
        description="Hybrid search (see [semantic]). Absent: nothing is indexed and search is exact.",
    )

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

    @property
    def semantic_enabled(self) -> bool:
        return self.semantic is not None and self.semantic.enabled


def resolve_config_path(config: Path | str | None, data_dir: Path | str | None) -> Path | None:
    """The settings file to read: explicit, then ``OBSMEM_CONFIG``, then ``<data_dir>/obsmem.toml``."""
    explicit = config or os.environ.get(CONFIG_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigurationError(f"settings file not found: {path}")
        return path
    base = Path(data_dir or os.environ.get(DATA_DIR_ENV) or default_data_dir()).expanduser()
    candidate = base / "obsmem.toml"
    return candidate if candidate.is_file() else None


def load_settings(
    config: Path | str | None = None, *, data_dir: Path | str | None = None, **overrides: Any
) -> Settings:
    """Build settings from the file, the environment and explicit overrides (highest)."""
    path = resolve_config_path(config, data_dir)
    if data_dir is not None:
        overrides["data_dir"] = Path(data_dir)
    # A subclass per load carries the file to read, so concurrent loads never see each other's file.
    reader = type("Settings", (Settings,), {"model_config": {**Settings.model_config, "toml_file": path}})
    try:
        return reader(**overrides)
    except ValidationError as exc:
        source = f" in {path}" if path else ""
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigurationError(f"invalid settings{source}: {problems}") from None
    except (OSError, ValueError) as exc:  # unreadable or malformed TOML
        raise ConfigurationError(f"cannot read settings file {path}: {exc}") from None


class _BuiltinSettings(Settings):
    """Settings that read neither a file nor the environment."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def builtin_settings(**values: Any) -> Settings:
    """The built-in defaults plus ``values``, ignoring any settings file and ``OBSMEM_*`` variables.

    For runs that must behave the same on every machine, such as ``obsmem demo``.
    """
    return _BuiltinSettings(**values)
