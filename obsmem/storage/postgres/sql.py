"""The one dialect hook the shared SQL needs: SQLite's ``?`` placeholders as psycopg's ``%s``.

The owning modules (``obsmem/events.py``, ``obsmem/memories.py``, ...) write their statements once, in the
SQL both databases share, with ``?`` placeholders as apsw takes them. psycopg formats ``%s`` placeholders
and reads every other ``%`` as the start of one, so a statement is translated once (cached): ``?`` outside
quoted text becomes ``%s`` and every literal ``%`` is doubled.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1024)
def to_psycopg(sql: str) -> str:
    """``sql`` with ``?`` placeholders as ``%s`` and literal ``%`` doubled (quoted text and identifiers kept)."""
    out: list[str] = []
    quote: str | None = None
    for char in sql:
        if char == "%":
            out.append("%%")
            continue
        if quote is not None:
            if char == quote:
                quote = None  # a doubled quote closes and reopens: the same text either way
            out.append(char)
            continue
        if char in ("'", '"'):
            quote = char
            out.append(char)
        elif char == "?":
            out.append("%s")
        else:
            out.append(char)
    return "".join(out)
