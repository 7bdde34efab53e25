"""Secret redaction: API keys, tokens, private keys and passwords are cut out before anything is stored.

Applied to every field of an event when it is appended (content, tool name, tool arguments, tool call
id), to every memory when it is written, again to whatever the Observer shows a model (defence in depth
for rows stored before a detector existed), and to the request path of every HTTP access-log line.
Session ids and project names are never redacted but refused when they look like a secret (see
:func:`secret_kind` and :mod:`obsmem.validation`): they are keys, shown in URLs, logs and memory blocks.

A redaction leaves a marker naming what was removed (``[REDACTED:api_key]``) so the text still reads
sensibly and the Observer can record that a key was used without ever seeing it. The detectors, in
:mod:`obsmem.secret_detectors`, favour recall over precision for things that look like credentials: a
false positive costs a few characters of context, a false negative leaks a secret into a database and a
model provider's logs. Hashes, commit ids, UUIDs and base64 content are left alone unless a word saying
"secret" stands right before them.

Invisible characters (zero-width spaces and joiners, bidi controls, soft hyphens: Unicode's format
category Cf, and a few fillers that render as nothing) are removed from the view the detectors match on,
so ``AKIA\\u200bIOSFODNN7EXAMPLE`` is found. What is stored is the original text with only the secret
spans replaced: an emoji sequence joined by U+200D or a Persian word with a zero-width non-joiner keeps
every character unless a secret covers it.

Redaction is deterministic, so the same event always redacts to the same text (idempotent appends stay
idempotent), and redacting twice changes nothing.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache
from typing import Any

from obsmem.secret_detectors import DETECTORS, SECRET_KEY_NAME, Scan, glued_token_end

MARK = "[REDACTED:{kind}]"
_MARKER = re.compile(r"\[REDACTED:[a-z_]+\]")
_ALREADY = re.compile(r"^\[REDACTED:[a-z_]+\]$")
# The kinds a marker redaction leaves names: each detector's, and ``secret`` (a value under a secret-named
# key). Only such a marker is evidence that redaction changed a text (holds_marker, shortest_original_length):
# ``[REDACTED:`` and any letters is text anyone can type.
MARKER_KINDS: frozenset[str] = frozenset({detector.kind for detector in DETECTORS} | {"secret"})
_LEFT_BY_REDACTION = re.compile(r"\[REDACTED:(?:" + "|".join(sorted(MARKER_KINDS)) + r")\]")

# Unicode's format characters (category Cf, Unicode 15), the combining grapheme joiner, the Hangul
# fillers, the Mongolian and Khmer invisible vowels and the variation selectors: none of them is visible,
# so any of them can split a key without a reader noticing.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f\U000e0100-\U000e01ef]"
)

Found = tuple[int, int, str]  # (start, end, marker kind) in the original text
_PRIORITIES = tuple(enumerate(DETECTORS))
# The detectors by their gate, each with its priority (its place in DETECTORS): a text whose scan found no
# token prefix, or no secret word, passes over a whole group with one test.
_UNGATED = tuple(item for item in _PRIORITIES if not item[1].prefixes and not item[1].at_words)
_BY_PREFIX = tuple(item for item in _PRIORITIES if item[1].prefixes)
_AT_WORDS = tuple(item for item in _PRIORITIES if item[1].at_words)


def _matching_view(text: str) -> tuple[str, list[int] | None]:
    """The text the detectors see, and where its invisible characters were taken out.

    The second value holds, for each removed character in order, the view index it would have had; a
    view index maps back with :func:`_original_index`. ``None`` means the view is the text itself (by
    far the common case: ASCII cannot hold an invisible character, and ``isascii`` is a C-level scan).
    Only the removed characters are listed, so a 2 MB text with one zero-width space costs two scans.
    """
    if text.isascii():
        return text, None
    removed = [match.start() for match in _INVISIBLE.finditer(text)]
    if not removed:
        return text, None
    return _INVISIBLE.sub("", text), [position - count for count, position in enumerate(removed)]


def _original_index(index: int, shifts: list[int]) -> int:
    """The index in the original text of character ``index`` of the view."""
    return index + bisect_right(shifts, index)


def _lowercase_same_length(view: str) -> str:
    """Lowercase with one character per character (``"İ".lower()`` is two), so offsets stay aligned."""
    lower = view.lower()
    if len(lower) == len(view):
        return lower
    return "".join(char.lower()[:1] for char in view)


def find_secrets(text: str) -> list[Found]:
    """The secret spans of ``text`` (in its own offsets), in order and not overlapping."""
    if not text:
        return []
    view, shifts = _matching_view(text)
    scan = Scan(view, _lowercase_same_length(view))
    if not scan.needed:
        return []
    claims: list[tuple[int, int, int, str]] = []
    for priority, detector in _UNGATED:
        for start, end in detector.find(scan):
            if end > start:
                claims.append((start, priority, end, detector.kind))
    if scan.prefixes:
        for priority, detector in _BY_PREFIX:
            if scan.prefixes.isdisjoint(detector.prefixes):
                continue
            for start, end in detector.find(scan):
                if end > start:
                    claims.append((start, priority, end, detector.kind))
    if scan.words:
        for priority, detector in _AT_WORDS:
            for start, end in detector.find(scan):
                if end > start:
                    claims.append((start, priority, end, detector.kind))
    if not claims:
        return []
    if "[REDACTED:" in view:
        # A marker left by an earlier pass is never part of a new span: redacting twice changes nothing.
        markers = [match.span() for match in _MARKER.finditer(view)]
        claims = [claim for claim in claims if not any(claim[0] < end and start < claim[2] for start, end in markers)]
    claims.sort()
    # Overlapping claims are merged into one span, their union, named by the first (earliest start, and at the
    # same start the detector listed first): what is hidden is never less than any detector's span. Keeping
    # only the first showed the rest of a longer claim (a long header value hidden unjudged up to a "!",
    # where the assignment inside it runs to the end of the secret).
    # A token glued to a span's end (``AIza`` and 35 characters, then ``sk-proj-...``) follows a letter or a
    # digit, which its left edge refuses: it is tried there, and hidden with the span (then whatever is glued to
    # its own end, and so on). Without this, the token was shown, and hidden only by a second redaction.
    spans: list[list[Any]] = []
    for start, _, end, kind in claims:
        if spans and start >= spans[-1][1]:
            _extend_by_glued_tokens(spans[-1], view, scan.lower)
        if spans and start < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end, kind])
    if spans:
        _extend_by_glued_tokens(spans[-1], view, scan.lower)
    if shifts is None:
        return [(start, end, kind) for start, end, kind in spans]
    return [(_original_index(start, shifts), _original_index(end - 1, shifts) + 1, kind) for start, end, kind in spans]


def _extend_by_glued_tokens(span: list[Any], view: str, lower: str) -> None:
    """Extend ``span`` over every token glued to its end (see :func:`glued_token_end`)."""
    while span[1] < len(view) and view[span[1] - 1].isascii() and view[span[1] - 1].isalnum():
        end = glued_token_end(view, lower, span[1])
        if end == span[1]:
            return
        span[1] = end


def redact_text(text: str) -> str:
    """The text with every recognised secret replaced by a marker."""
    if len(text) <= _SHORT:
        return _redact_short(text)
    return _redact(text)


# How far past a cut a secret that starts before it may reach and still be recognised whole (a JWT, a long
# key); an unterminated private-key block is recognised by its start alone.
_SECRET_REACH = 4096


def redacted_prefix(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text`` as redacted, with what follows them in view: a secret the
    cut splits is redacted whole (its marker kept whole), where cutting first would keep its first half
    (``ghp_Ab3dE``) as a fragment no detector recognises. The caller says that the rest was left out."""
    # The window must reach past the cut *as redacted*: a long secret before the cut (a private-key block)
    # shrinks to its marker and pulls text from beyond the window's end under the cut, where a token the
    # window's end split would be kept as a fragment. So the window grows until its redacted form does,
    # doubling at least: an unterminated private-key block shrinks any window to its start and a marker, and
    # windows grown by the shortfall alone scanned a few megabytes of such a block for seconds.
    window = limit + _SECRET_REACH
    redacted = redact_text(text[:window])
    while window < len(text) and len(redacted) < limit + _SECRET_REACH:
        window += max(limit + _SECRET_REACH - len(redacted), window)
        redacted = redact_text(text[:window])
    end = limit
    for marker in _MARKER.finditer(redacted, max(limit - 64, 0), limit + 64):
        if marker.start() < limit < marker.end():
            end = marker.end()  # a marker the cut would split is kept whole
    return redacted[:end]


# Short texts repeat: tool names, argument keys, roles of JSON arguments ("command", "description").
# Redaction is deterministic, so a bounded cache of them returns the same text without scanning again.
_SHORT = 64


# Passes over a text that held a secret, each over the last one's output, until one finds nothing new. A
# detector's left edge refuses a lead right after a letter, a digit or a dash (a header, an option, a prose lead
# or a URL glued to the end of another secret: "AKIA...--password x"), which the marker's "]" no longer is; a
# pass finds nothing on the marker's own text, so the second pass ends it in practice, and the bound keeps the
# time linear for any text.
_PASSES = 3


def _redact(text: str) -> str:
    redacted = _replace_secrets(text)
    for _ in range(_PASSES - 1):
        if redacted is text:
            break
        text, redacted = redacted, _replace_secrets(redacted)
    return redacted


def _replace_secrets(text: str) -> str:
    """``text`` with each secret one pass of the detectors finds replaced by its marker (``text`` itself when
    it finds none)."""
    found = find_secrets(text)
    if not found:
        return text
    pieces: list[str] = []
    done = 0
    for start, end, kind in found:
        pieces.append(text[done:start])
        pieces.append(MARK.format(kind=kind))
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


_redact_short = lru_cache(maxsize=4096)(_redact)


def secret_kind(value: str) -> str | None:
    """What kind of secret ``value`` holds (the first one found), or None: for identifiers that are refused
    rather than redacted."""
    found = find_secrets(value)
    return found[0][2] if found else None


def is_secret_key_name(key: str) -> bool:
    """Whether ``key`` names a secret (``api_key``, ``token``, ``password``): a value under such a name is
    hidden whole even when the value alone does not look like a credential."""
    return _is_secret_key_name_cached(key) if len(key) <= _SHORT else _is_secret_key_name(key)


def _is_secret_key_name(key: str) -> bool:
    view, _ = _matching_view(key)
    return SECRET_KEY_NAME.match(view) is not None


# Argument keys repeat on every tool call ("command", "file_path"): the answer is cached like short texts.
_is_secret_key_name_cached = lru_cache(maxsize=4096)(_is_secret_key_name)


def _hide(value: Any) -> Any:
    """Everything under a secret-named key, hidden: every string and number leaf becomes a marker (a
    nested ``{"password": {"value": ...}}`` or ``{"secret": [...]}`` holds the secret one level down).
    Keys inside are still redacted as text; empty strings, booleans and null say nothing and are kept."""
    if isinstance(value, str):
        return value if not value or _ALREADY.match(value) else MARK.format(kind="secret")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return MARK.format(kind="secret")
    if isinstance(value, list):
        return [_hide(item) for item in value]
    if isinstance(value, dict):
        return {redact_text(key) if isinstance(key, str) else key: _hide(item) for key, item in value.items()}
    return value


def _is_secret_option(item: Any) -> bool:
    """An argv item such as ``--password`` or ``--db-token``: the next item is its value."""
    return isinstance(item, str) and item.startswith("-") and "=" not in item and is_secret_key_name(item.lstrip("-"))


def _redact_list(items: list[Any]) -> list[Any]:
    result: list[Any] = []
    hide_next = False
    for item in items:
        result.append(_hide(item) if hide_next and not isinstance(item, (dict, list)) else redact_json(item))
        hide_next = _is_secret_option(item)
    return result


def _secret_pair_name(value: dict[Any, Any]) -> bool:
    """``{"name": "DB_PASSWORD", "value": ...}`` (environment lists, Kubernetes, CI variables): the
    value belongs to the secret the name says."""
    name = value.get("name", value.get("key"))
    return "value" in value and isinstance(name, str) and is_secret_key_name(name)


def redact_json(value: Any) -> Any:
    """Redact every string in a JSON value, keys included. Everything under a key that names a secret is
    hidden, however deeply nested; so is the item after a ``--password``-like argv item and the
    ``value`` of a ``{"name": <secret name>, "value": ...}`` pair. Two keys that redact to the same
    marker stay apart (``[REDACTED:api_key]#2``)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return _redact_list(value)
    if isinstance(value, dict):
        result: dict[Any, Any] = {}
        pair = _secret_pair_name(value)
        for key, item in value.items():
            name = key
            if isinstance(key, str):
                name = redact_text(key)
                if name != key and (name in result or name in value):
                    number = 2
                    while f"{name}#{number}" in result or f"{name}#{number}" in value:
                        number += 1
                    name = f"{name}#{number}"
            if isinstance(key, str) and (is_secret_key_name(key) or (pair and key == "value")):
                result[name] = _hide(item)
            else:
                result[name] = redact_json(item)
        return result
    return value


def shortest_original_length(text: str) -> int:
    """The fewest characters ``text`` can have had before it was redacted: each marker stands for a secret
    of at least one character. A write that limits a text's length before redacting it (an event's
    content, an observation's) may store text longer than the limit; never text whose shortest original is."""
    return len(text) - sum(len(marker.group()) - 1 for marker in _LEFT_BY_REDACTION.finditer(text))


def holds_marker(text: object) -> bool:
    """Whether ``text`` holds a redaction marker: a sign that redaction may have changed it after the id
    made from it was derived (a restore redacts text an older obsmem stored unredacted, and keeps its id)."""
    return isinstance(text, str) and _LEFT_BY_REDACTION.search(text) is not None
