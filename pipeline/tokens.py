"""A fast local token estimate, used for thresholds, chunk packing and status figures.

No tokenizer is loaded: the estimate must cost next to nothing on the append path. BPE tokenizers give
English prose and code roughly four characters per token, and most non-Latin scripts about one token per
character. Counting characters and UTF-8 bytes (both done in C) separates the two cheaply:

    tokens ~ 0.25 * chars + 0.375 * (utf8_bytes - chars)

ASCII costs 1/4 per character, two-byte characters (accented Latin, Cyrillic, Greek) 5/8, three-byte
characters (CJK) 1, four-byte characters (emoji) 11/8. The formula is linear, so the estimate of a
concatenation is the sum of the estimates (up to rounding), and SQL can compute it over many rows.
"""

from __future__ import annotations

import math

MESSAGE_OVERHEAD = 4  # role markers and separators around each message or event


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    if text.isascii():  # one byte a character: no need to encode it (this runs twice per appended event)
        return math.ceil(0.25 * len(text))
    chars = len(text)
    extra = len(text.encode("utf-8", "surrogatepass")) - chars
    return math.ceil(0.25 * chars + 0.375 * extra)


def token_cost(text: str) -> float:
    """The token estimate of :func:`estimate_tokens`, unrounded, so sums over many
    observations agree with the SQL sum (:func:`~obsmem.pipeline.memory_items.active_observation_tokens`)."""
    chars = len(text)
    return 0.25 * chars + 0.375 * (len(text.encode("utf-8", "surrogatepass")) - chars)


def sql_estimate(column: str) -> str:
    """The same estimate as a SQL expression over a text column (summed over rows by the caller). Its UTF-8
    bytes are ``octet_length``, which SQLite (3.43 on, apsw 3.45 bundles newer) and PostgreSQL share; the
    cast keeps it a double on PostgreSQL (whose decimal literals are exact numerics), as SQLite's is."""
    return f"CAST(0.25 * length({column}) + 0.375 * (octet_length({column}) - length({column})) AS DOUBLE PRECISION)"


def event_tokens(role: str, type_: str, content: str, tool_name: str | None, tool_args: str | None) -> int:
    """What an event adds to the Observer's unobserved backlog. System messages are never shown, so 0."""
    if role == "system":
        return 0
    total = MESSAGE_OVERHEAD + estimate_tokens(content)
    if tool_name:
        total += estimate_tokens(tool_name)
    if tool_args:
        total += estimate_tokens(tool_args)
    return total


def chars_for_tokens(text: str, start: int, budget: int) -> int:
    """The largest ``end`` such that ``estimate_tokens(text[start:end]) <= budget`` (at least start + 1)."""
    # Every character costs at least a quarter token, so no more than 4 * budget characters fit.
    low, high = start + 1, min(len(text), start + 4 * max(budget, 0) + 1)
    if estimate_tokens(text[start:high]) <= budget:
        return high
    # The estimate grows monotonically with end: binary search.
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(text[start:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return max(low, start + 1)
