"""A ranked list of chunk labels, the common currency of the keyword list, the vector list and fusion."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RankedList:
    """Chunk labels best first, each with the list's own score (higher is better; never shown to users)."""

    name: str
    items: list[tuple[int, float]] = field(default_factory=list)
    full: bool = False  # the list stopped at its candidate budget (more matches existed)
    # The most any item could score for this query (the keyword list: what a chunk matching every query
    # term could reach), or None when the list's scores have no known bound. Fusion divides by it.
    ceiling: float | None = None

    @property
    def labels(self) -> list[int]:
        return [label for label, _ in self.items]
