"""Integer bounds for every number a client sends (seqs, ids, limits, cursors, sizes).

A number from a request is an integer only if it is one: JSON ``true``, ``"1"`` and ``1.0`` are refused,
not coerced, so a client that sends the wrong type learns it at once instead of writing something it did
not mean. Every integer is checked against its range *before* it reaches SQLite, whose integers are
64-bit: a larger value would raise ``OverflowError`` deep inside a write and take the whole request with
it. Sequence numbers stop at 2^53 so they stay exact in every JSON parser.
"""

from __future__ import annotations

import re

MAX_SEQ = 2**53  # exact in JSON numbers everywhere


def is_strict_int(value: object) -> bool:
    """True for a real integer (``bool`` is an ``int`` subclass in Python, but not a number in JSON)."""
    return isinstance(value, int) and not isinstance(value, bool)


_DECIMAL = re.compile(r"-?[0-9]{1,20}")


def decimal_integer(value: object) -> object:
    """A query-string integer as plain decimal digits: ``1.0``, ``1_000``, ``+1`` and `` 1`` are refused.

    Used before pydantic's lax conversion, which accepts all of those; range checks come after it.
    """
    if isinstance(value, str):
        if not _DECIMAL.fullmatch(value):
            raise ValueError("must be a whole number written in decimal digits")
        return int(value)
    if not is_strict_int(value):
        raise ValueError("must be an integer")
    return value
