"""What an import did, per source file and in total (typed; ``to_dict`` is the wire shape of ``--json``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# Problems listed per file (all are counted): enough to find them, bounded for huge broken files.
MAX_LISTED_PROBLEMS = 50


@dataclass(frozen=True)
class Problem:
    """A record that could not be imported (or was imported with a defect), named by line or row."""

    reason: str
    line: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "line": self.line, "detail": self.detail}


@dataclass
class FileReport:
    """One source file: ``status`` is ``imported``, ``unchanged`` (not read: same size and time),
    ``rewritten`` (its imported part changed: merged without duplicates), ``missing`` or ``failed``."""

    path: str
    source: str
    status: str = "imported"
    projects: set[str] = field(default_factory=set)
    sessions: set[str] = field(default_factory=set)
    events: int = 0
    added: int = 0
    duplicates: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)
    listed: list[Problem] = field(default_factory=list)
    bytes_read: int = 0
    line: int = 0  # the first line (or row) of the events being stored: where a storage fault stopped the file

    def problem(self, reason: str, line: int, detail: str) -> None:
        self.problems[reason] += 1
        if len(self.listed) < MAX_LISTED_PROBLEMS:
            self.listed.append(Problem(reason, line, detail))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "source": self.source,
            "status": self.status,
            "projects": sorted(self.projects),
            "sessions": len(self.sessions),
            "session_ids": sorted(self.sessions),
            "events": self.events,
            "added": self.added,
            "duplicates": self.duplicates,
            "skipped": dict(sorted(self.skipped.items())),
            "problems": dict(sorted(self.problems.items())),
            "problem_lines": [p.to_dict() for p in self.listed],
        }


@dataclass
class ImportRun:
    """Every file of one ``obsmem import`` (or one round of ``--follow``)."""

    source: str
    files: list[FileReport] = field(default_factory=list)

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def duplicates(self) -> int:
        return sum(f.duplicates for f in self.files)

    @property
    def problems(self) -> int:
        return sum(sum(f.problems.values()) for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        skipped: Counter[str] = Counter()
        for report in self.files:
            skipped.update(report.skipped)
        return {
            "source": self.source,
            "files": [f.to_dict() for f in self.files],
            "totals": {
                "files": len(self.files),
                "sessions": sum(len(f.sessions) for f in self.files),
                "events": sum(f.events for f in self.files),
                "added": self.added,
                "duplicates": self.duplicates,
                "skipped": sum(skipped.values()),
                "problems": self.problems,
            },
        }
