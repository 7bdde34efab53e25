"""Text a model or an agent reads inside a block that frames it as data, kept inside that block.

Memory reaches models framed: the projection wraps itself in ``<obsmem-memory>`` (the untrusted notes in a
section of their own), and the stages' prompts put memory in ``<memory>`` and the conversation in
``<transcript>``. An item that holds one of those tags could end its block early, and what follows would
stand outside it: read as instructions rather than data, and outside the cut the Observer's input hygiene
makes of echoed memory. An item holding a line separator could likewise forge a line that reads as an item
of its own. So every item is rendered through these functions, when it is rendered: text stored before
the write rules refused such content is shown safely too.
"""

from __future__ import annotations

import re

from obsmem.validation import LINE_BREAKS

# The tags that frame data (the projection's, pipeline/observe/hygiene.py MEMORY_TAG, and the prompts'),
# opening or closing, however spaced or cased.
_FRAMING_TAG_START = re.compile(r"<(\s*/?\s*(?:obsmem-memory|memory|transcript)\b)", re.IGNORECASE)


def escape_framing_tags(text: str) -> str:
    """``text`` with the ``<`` of every framing tag written ``&lt;``: it cannot open or close a block."""
    return _FRAMING_TAG_START.sub(r"&lt;\1", text)


def inline_memory_text(text: str) -> str:
    """``text`` as rendered memory shows an item of it (the projection, the stages' prompts): on one line
    (line separators become a space) and unable to open or close a block."""
    return escape_framing_tags(LINE_BREAKS.sub(" ", text))
