"""Transcript importers: the coding agents' session files into obsmem events.

One module per agent format (:mod:`~obsmem.transcripts.claude_code`, :mod:`~obsmem.transcripts.codex`,
:mod:`~obsmem.transcripts.gemini_cli`, :mod:`~obsmem.transcripts.opencode`,
:mod:`~obsmem.transcripts.aider`, and :mod:`~obsmem.transcripts.chat` for obsmem events and OpenAI chat
messages), where each agent keeps them (:mod:`~obsmem.transcripts.discovery`), which project a transcript
goes to (:mod:`~obsmem.transcripts.mapping`), and the importer that stores only what is new
(:mod:`~obsmem.transcripts.importer`, with its watermarks in :mod:`~obsmem.transcripts.watermarks` and
the records imported once, whichever file replays them, in :mod:`~obsmem.transcripts.replays`, and
rewound document sessions merged in order in :mod:`~obsmem.transcripts.rewinds`).
A base package: it stores through an ``append`` callable the app floor hands it, so it never imports
the app, the pipeline or a surface.
"""

from obsmem.transcripts.discovery import SOURCES, claude_subagents, default_roots, discover, find_transcripts
from obsmem.transcripts.files import expand_home
from obsmem.transcripts.importer import CHUNK_EVENTS, FileProgress, ImportOptions, TranscriptImporter
from obsmem.transcripts.mapping import project_for_cwd, project_for_hash, slug_for_directory
from obsmem.transcripts.records import DEFAULT_MAX_TOOL_OUTPUT_CHARS, ReaderOptions
from obsmem.transcripts.reports import FileReport, ImportRun, Problem
from obsmem.transcripts.watermarks import IMPORT_MARKS_DIR, UnsavedWatermarks

__all__ = [
    "CHUNK_EVENTS",
    "DEFAULT_MAX_TOOL_OUTPUT_CHARS",
    "IMPORT_MARKS_DIR",
    "SOURCES",
    "FileProgress",
    "FileReport",
    "ImportOptions",
    "ImportRun",
    "Problem",
    "ReaderOptions",
    "TranscriptImporter",
    "UnsavedWatermarks",
    "claude_subagents",
    "default_roots",
    "discover",
    "expand_home",
    "find_transcripts",
    "project_for_cwd",
    "project_for_hash",
    "slug_for_directory",
]
