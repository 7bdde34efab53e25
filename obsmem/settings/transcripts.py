"""The ``[transcripts]`` settings section: how ``obsmem import`` and ``obsmem hook`` read agents' sessions.

[transcripts]
max_tool_output_chars = 20000
keep_thinking = false
reading_processes = 2
reading_min_megabytes = 8

[transcripts.project_map]
"/home/ann/src/shop" = "shop"
"/home/ann/src/shop-admin" = "shop"
"""

from __future__ import annotations

from pydantic import Field, field_validator

from obsmem.errors import ValidationFailed
from obsmem.settings.base import Section
from obsmem.validation import project_name


class TranscriptSettings(Section):
    """Transcript imports: project mapping, tool-output cut size, thinking blocks, the reading processes."""

    project_map: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Working directory (absolute path) -> project slug. A transcript recorded in that directory or "
            "below it goes to that project; the longest matching path wins."
        ),
    )
    max_tool_output_chars: int = Field(
        default=20_000,
        ge=200,
        le=2_000_000,
        description="Tool results (and string arguments) longer than this are cut; the stored text says so.",
    )
    keep_thinking: bool = Field(
        default=False, description="Store the agents' thinking/reasoning blocks as assistant messages."
    )
    reading_processes: int = Field(
        default=2,
        ge=0,
        le=16,
        description=(
            "Processes that read, parse, validate and redact the transcript files of a large import while this "
            "one writes, each a file at a time (0: read in-process). What is stored is the same either way."
        ),
    )
    reading_min_megabytes: float = Field(
        default=8.0,
        ge=0,
        le=1_000_000,
        description=(
            "Reading processes are started only when an import has at least this many megabytes of transcript "
            "left to read (starting one costs a few tenths of a second); smaller imports are read in-process."
        ),
    )

    @field_validator("project_map")
    @classmethod
    def _absolute_paths_to_slugs(cls, value: dict[str, str]) -> dict[str, str]:
        for path, slug in value.items():
            if not path.startswith("/"):
                raise ValueError("keys must be absolute paths (starting with '/')")
            try:
                project_name(slug)
            except ValidationFailed:
                raise ValueError("values must be project slugs: 1-64 characters of a-z, 0-9, '.', '_' or '-'") from None
        return value
