"""Lossless export and restore of a whole project, as one versioned JSON Lines file.

``export_project(service, project, out)`` writes every canonical row of a project (sessions, events,
observations with their citations, reflections with their supports, generations and drops, coverage and
the Observer's watermarks, the pipeline event log, model overrides, notes where the schema has them) in
one read snapshot. ``restore_project(service, path, project)`` checks a file whole and restores it into
a new project in one transaction, with every id as it was; the indexes are derived and rebuilt. The
format is described in docs/export-format.md; what each table becomes is :data:`KINDS` and
:data:`DERIVED_TABLES`.
"""

from obsmem.exporting.format import FORMAT, FORMAT_VERSION, Progress, ProjectService
from obsmem.exporting.kinds import DERIVED_TABLES, KINDS, RecordKind, project_tables, unclassified_tables
from obsmem.exporting.reader import ExportHeader, ExportReader
from obsmem.exporting.restore import RestoreReceipt, restore_project, verify_export
from obsmem.exporting.writer import ExportReceipt, export_project

__all__ = [
    "DERIVED_TABLES",
    "FORMAT",
    "FORMAT_VERSION",
    "KINDS",
    "ExportHeader",
    "ExportReader",
    "ExportReceipt",
    "ProjectService",
    "Progress",
    "RecordKind",
    "RestoreReceipt",
    "export_project",
    "project_tables",
    "restore_project",
    "unclassified_tables",
    "verify_export",
]
