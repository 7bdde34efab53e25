"""Loading settings: which file is read, and how a bad value becomes one clear ConfigurationError.

The settings file is ``--config`` / ``OBSMEM_CONFIG``, else ``obsmem.toml`` in the data directory when
it exists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from obsmem.errors import ConfigurationError
from obsmem.settings.main import Settings, default_data_dir

CONFIG_ENV = "OBSMEM_CONFIG"
DATA_DIR_ENV = "OBSMEM_DATA_DIR"


def home_expanded(path: Path | str, what: str) -> Path:
    """``path`` with ``~`` or ``~user`` expanded; one naming a user without a home directory is a
    ConfigurationError (``Path.expanduser`` raises RuntimeError, which surfaced as a traceback)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        raise ConfigurationError(f"{what} {path}: no home directory for its ~") from None


def resolve_config_path(config: Path | str | None, data_dir: Path | str | None) -> Path | None:
    """The settings file to read: explicit, then ``OBSMEM_CONFIG``, then ``<data_dir>/obsmem.toml``."""
    explicit = config or os.environ.get(CONFIG_ENV)
    if explicit:
        path = home_expanded(explicit, "settings file")
        if not path.is_file():
            raise ConfigurationError(f"settings file not found: {path}")
        return path
    base = home_expanded(data_dir or os.environ.get(DATA_DIR_ENV) or default_data_dir(), "data directory")
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
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
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
