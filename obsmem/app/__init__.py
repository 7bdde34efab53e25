"""The application floor: :class:`Obsmem`, the composition root every surface and the eval harness use.

It sits above the stages (it builds the pipeline, the indexer and the searchers) and below the surfaces
(HTTP, CLI, agent tools, MCP) and the eval harness, which call it. Nothing in the base or in a stage
imports it. The names below are what the layers above may import: ``Obsmem`` and the typed results its
methods return (each with ``to_dict()``, the JSON document every surface publishes); the parts of a
recollection are retrieval's types, re-exported here so the layers above need not reach below the app;
``LOCAL_USER`` names the local account as the owner of a caller's user tier of notes (docs/trust.md);
``migrate_project`` moves a project between two services and verifies the copy (``obsmem migrate``);
``check_search`` checks a search's arguments as ``Obsmem.search`` does, for a surface that passes them on.
"""

from obsmem.app.migrate import MigrationReport, migrate_project
from obsmem.app.results import (
    CurrentActivity,
    Forgotten,
    GenerationInfo,
    IndexReport,
    IndexStatus,
    IndexTotals,
    JobCounts,
    JobList,
    JobRow,
    LastError,
    MemoryDetails,
    ModelChoices,
    ModelSwitch,
    ObservationDetail,
    PoolPressure,
    ProjectStatus,
    Recollection,
    ReflectionDetail,
    RoleModelChoice,
    SessionJobs,
    SessionStatus,
)
from obsmem.app.search_checks import CheckedSearch, check_search
from obsmem.app.service import Obsmem
from obsmem.app.typed import JsonResult
from obsmem.retrieval import RecalledEvent, RecalledMemory, SourceEvent, SourceRef
from obsmem.trust import LOCAL_USER

__all__ = [
    "LOCAL_USER",
    "CheckedSearch",
    "CurrentActivity",
    "Forgotten",
    "GenerationInfo",
    "IndexReport",
    "IndexStatus",
    "IndexTotals",
    "JobCounts",
    "JobList",
    "JobRow",
    "JsonResult",
    "LastError",
    "MemoryDetails",
    "MigrationReport",
    "ModelChoices",
    "ModelSwitch",
    "ObservationDetail",
    "Obsmem",
    "PoolPressure",
    "ProjectStatus",
    "RecalledEvent",
    "RecalledMemory",
    "Recollection",
    "ReflectionDetail",
    "RoleModelChoice",
    "SessionJobs",
    "SessionStatus",
    "SourceEvent",
    "SourceRef",
    "check_search",
    "migrate_project",
]
