"""Settings: one model, read from a TOML file and overridden by the environment.

Precedence, highest first: values passed in code (the CLI's flags), ``OBSMEM_*`` environment variables
(nested sections with ``__``, e.g. ``OBSMEM_SERVER__PORT=9000``), the settings file, the defaults.
Every field is documented in docs/configuration.md; a test keeps the two in step.

- :mod:`obsmem.settings.base`: ``Section`` (unknown keys are errors) and the one base-URL check;
- :mod:`obsmem.settings.main`: ``Settings`` and every section but `[semantic]`, role overrides derived
  from ``ModelSettings``;
- :mod:`obsmem.settings.semantic`: the `[semantic]` section (hybrid search, indexer, embeddings, reranker);
- :mod:`obsmem.settings.storage`: the `[storage]` section (SQLite or PostgreSQL);
- :mod:`obsmem.settings.transcripts`: the `[transcripts]` section (transcript imports);
- :mod:`obsmem.settings.loading`: which file is read, and errors that name the bad setting.
"""

from obsmem.settings.base import Section, check_base_url
from obsmem.settings.loading import (
    CONFIG_ENV,
    DATA_DIR_ENV,
    builtin_settings,
    home_expanded,
    load_settings,
    resolve_config_path,
)
from obsmem.settings.main import (
    ALL_PROJECTS,
    ENV_PREFIX,
    MIN_API_KEY_CHARS,
    ApiKey,
    DropperSettings,
    JobSettings,
    ModelOverride,
    ModelOverrideBase,
    ModelSettings,
    ObserverSettings,
    PoolSettings,
    ReflectorSettings,
    SearchSettings,
    ServerSettings,
    Settings,
    default_data_dir,
)
from obsmem.settings.semantic import (
    Bm25Settings,
    EmbeddingSettings,
    FusionSettings,
    IndexSettings,
    RerankerSettings,
    SemanticSettings,
    SupersessionSettings,
)
from obsmem.settings.storage import StorageSettings
from obsmem.settings.transcripts import TranscriptSettings
from obsmem.settings.trust import JudgeSettings, TrustSettings

__all__ = [
    "ALL_PROJECTS",
    "CONFIG_ENV",
    "DATA_DIR_ENV",
    "ENV_PREFIX",
    "MIN_API_KEY_CHARS",
    "ApiKey",
    "Bm25Settings",
    "DropperSettings",
    "EmbeddingSettings",
    "FusionSettings",
    "IndexSettings",
    "JobSettings",
    "JudgeSettings",
    "ModelOverride",
    "ModelOverrideBase",
    "ModelSettings",
    "ObserverSettings",
    "PoolSettings",
    "ReflectorSettings",
    "RerankerSettings",
    "SearchSettings",
    "SemanticSettings",
    "ServerSettings",
    "Settings",
    "StorageSettings",
    "SupersessionSettings",
    "TrustSettings",
    "TranscriptSettings",
    "Section",
    "builtin_settings",
    "home_expanded",
    "check_base_url",
    "default_data_dir",
    "load_settings",
    "resolve_config_path",
]
