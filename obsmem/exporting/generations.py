"""Restoring generations through the schema's own rules rather than around them.

The generation tables are guarded by triggers (see ``m0004_generations``): records attach only to a
running generation, a finished generation is never written again, and the active pointer starts at
generation 1 and moves one promoted child at a time. A restore keeps every rule switched on and replays
history in the one order the rules allow:

1. each generation is inserted as it was exported, but ``running`` (and so without a number);
2. its reflection and drop records attach to it while it runs;
3. :func:`finish_generations` gives every generation its exported state and number;
4. :func:`replay_active_generation` walks each session's pointer from generation 1 up the parent chain to
   the exported one.

So a restored ledger is one the schema itself accepted: a file whose generations do not form one chain
per session is refused, not restored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from obsmem.errors import ExportInvalid
from obsmem.exporting.rows import RestoreState, flush_rows, insert_row

if TYPE_CHECKING:
    from obsmem.exporting.kinds import RecordKind

_FINAL = "finished_generations"  # RestoreState.pending key: generation row -> (state, number)


def insert_generation(state: RestoreState, kind: RecordKind, row: dict[str, Any]) -> None:
    if row.get("state") != "running":
        finals: dict[Any, tuple[Any, Any]] = state.pending.setdefault(_FINAL, {})
        finals[row.get("id")] = (row.get("state"), row.get("number"))
    insert_row(state, kind, {**row, "state": "running", "number": None})


def finish_generations(state: RestoreState) -> None:
    finals: dict[Any, tuple[Any, Any]] = state.pending.pop(_FINAL, {})
    for row_id, (final_state, number) in finals.items():
        state.conn.execute("UPDATE generations SET state = ?, number = ? WHERE id = ?", (final_state, number, row_id))


def replay_active_generation(state: RestoreState, kind: RecordKind, row: dict[str, Any]) -> None:
    """Point the session at generation 1 of the exported generation's chain, then move it forward one
    generation at a time to the exported one; the last move carries the exported ``promoted_at``."""
    chain = _chain_to(state, row.get("generation_row"))
    if len(chain) != row.get("number"):
        raise ExportInvalid(
            f"line {state.line}: the active generation's number does not match its chain of parent generations"
        )
    session_id, promoted_at = row.get("session_id"), row.get("promoted_at")
    first = {"session_id": session_id, "generation_row": chain[0], "number": 1, "promoted_at": promoted_at}
    insert_row(state, kind, {**row, **first} if len(chain) == 1 else {**first})
    # On PostgreSQL the insert waits in a batch: send it before the moves, which must find the pointer.
    flush_rows(state)
    for number, generation_row in enumerate(chain[1:], start=2):
        state.conn.execute(
            "UPDATE active_generation SET generation_row = ?, number = ?, promoted_at = ? WHERE session_id = ?",
            (generation_row, number, promoted_at, session_id),
        )


def _chain_to(state: RestoreState, generation_row: object) -> list[int]:
    """Generation rows from the root of ``generation_row``'s chain to it, oldest first."""
    chain: list[int] = []
    seen: set[object] = set()
    current = generation_row
    while current is not None:
        if current in seen:
            raise ExportInvalid(f"line {state.line}: the generations' parents form a loop")
        found = state.conn.execute("SELECT parent FROM generations WHERE id = ?", (current,)).fetchone()
        if found is None:
            raise ExportInvalid(f"line {state.line}: the active generation names a generation the file lacks")
        seen.add(current)
        chain.append(int(current))  # type: ignore[call-overload]
        current = found[0]
    chain.reverse()
    return chain
