"""Progress bars for long eval steps (tqdm on stderr, so stdout stays the report or JSON)."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """Hands out tqdm bars, or silent ones when ``enabled`` is false (tests, ``--json``, pipes)."""

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled

    def bar(self, description: str, total: int, unit: str = "question") -> Any:
        from tqdm import tqdm

        return tqdm(total=total, desc=description, unit=unit, disable=not self.enabled, file=sys.stderr, leave=False)


SILENT = Progress(False)
