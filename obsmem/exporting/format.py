"""The fixed points of the export format, and what the exporter and restorer need of the service.

A file is JSON Lines: a header, one record per row grouped by kind in the order of
:data:`obsmem.exporting.kinds.KINDS`, and a trailer whose checksum covers every line before it. The whole
format is described in docs/export-format.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from obsmem.projects import ProjectRegistry

FORMAT = "obsmem-export"
# Raised whenever a reader of the previous version would lose or misread something in a new file: a new
# record kind, a new column, a changed meaning. Readers refuse newer versions rather than drop data.
FORMAT_VERSION = 1
END_KIND = "end"  # the trailer's kind

# ``(phase, done, total)``: phase ``export`` counts records written; ``verify`` and ``restore`` count
# records read in the restore's two passes.
Progress = Callable[[str, int, int], None]
PROGRESS_EVERY = 1000  # records between progress reports


class IndexNotifier(Protocol):
    def notify(self, project: str) -> None: ...


class ProjectService(Protocol):
    """What export and restore use of the service (``obsmem.Obsmem`` is one): its projects, and the indexer
    to wake once restored memories await indexing."""

    @property
    def projects(self) -> ProjectRegistry: ...

    @property
    def indexer(self) -> IndexNotifier | None: ...
