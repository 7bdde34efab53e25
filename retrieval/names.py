"""Names a question asks about: those no memory holds (a reason to say that nothing is close), and the
identifiers a question writes, which put the memories that write them first (:func:`named_first`).

A question that names a thing (``Auth0``, ``ORBIT_STRICT_SCOPES``, ``Quay.io``, ``#2599``, ``Svelte``)
asks about that thing. When no indexed chunk holds the name, the nearest memories are at best about
something next door, however close their vectors are: the fused evidence of such a near miss is often as
high as an answer's (docs/eval.md, "Abstention"), but the keyword index can say plainly that the name was
never written down.

What counts as a name, from the question's own spelling:

- **identifier-shaped** words: letters with a digit, an underscore or a dot inside, a ``#``, a path or a
  command-line option (``nRF52840``, ``wait_for_orders_export``, ``Quay.io``, ``#2599``,
  ``loaders/http.py``, ``--dry-run``), and a short code span in backticks (`` `qm deploy` ``);
  numbers, dates, times, quantities and versions alone are not names (they are not what a question is
  about);
- **capitalised** words that do not start a sentence, camelCase and all-capitals words (``Dagster``,
  ``useInspectionTimer``, ``SAML``), unless the embedding model knows the word whole (``Germany``,
  ``Google``, ``PDF``): a word the encoder has in its vocabulary is language it can relate to other words,
  so a memory may answer it in other words (a question about "Germany" for a memory about a Frankfurt
  region) and the vector list decides; a word the encoder can only spell out in pieces is a name it cannot
  relate to anything, so the literal name is the evidence. Without a vocabulary (an embedding service),
  only identifier-shaped words count.

Months and weekdays are never names (dates are filters and date columns, not words of a memory). A name is
*unknown* when one of its words (the keyword list's own query words, stop words aside) is in no indexed
chunk; :func:`unknown_names` asks the index through a counting function.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from obsmem.retrieval.bm25 import ENGLISH_STOPWORDS, query_words

CALENDAR_WORDS = frozenset(
    """
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
# Characters that wrap a word in a sentence rather than belong to it, and those that close one.
_WRAPPING = "\"'`\u2018\u2019\u201c\u201d()[]{}<>,;:!?*"
_CLOSING = "\"'`\u2019\u201d)]}>*"
_DOTTED = re.compile(r"\w\w\.\w\w")
# A number with a short unit or suffix (``8th``, ``3pm``, ``10ms``, ``5GB``, ``100k``, ``1990s``), and a date
# or time in ISO form: quantities and times, not names.
_NUMBER = r"[+\-~]?\d+(?:[.,:]\d+)*(?:[a-z]{1,3})?"
_QUANTITY = re.compile(rf"{_NUMBER}(?:[-\u2013]{_NUMBER})?", re.IGNORECASE)  # also -5C, ~10ms, 3-4pm
_ISO_DATE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?", re.IGNORECASE
)
_CODE_SPAN = re.compile(r"`([^`]+)`")
CODE_SPAN_WORDS = 3
# A command-line option: --dry-run, --max-retries; -v, -rf, -j8 (one dash: a few letters, not "-ish").
_FLAG = re.compile(r"--[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*|-[a-z]{1,2}\d*", re.IGNORECASE)
_POSSESSIVE = re.compile(r"['\u2019]s$", re.IGNORECASE)
_CAMEL = re.compile(r"[a-z][A-Z]")


@dataclass(frozen=True)
class Name:
    """A name in a question: as written, its query words, and whether its shape alone makes it a name."""

    text: str
    words: tuple[str, ...]
    shaped: bool


def identifier_shaped(token: str) -> bool:
    """A ``#`` or a command-line option (``--dry-run``); or a letter with a digit, an underscore, or a dot
    between word parts of two characters or more (``Quay.io``, not ``U.S``); or a path (two slashes, or
    one with a dot: ``loaders/http.py``, not ``artists/bands``). Numbers, dates, times and versions alone
    (``2023``, ``1,2023``, ``4.2``, ``2024-01-05T10:00``) and quantities (``8th``, ``3pm``, ``10ms``,
    ``5GB``, ``1990s``) are not names."""
    if "#" in token or _FLAG.fullmatch(token):
        return True
    if not any(c.isalpha() for c in token) or _QUANTITY.fullmatch(token) or _ISO_DATE.fullmatch(token):
        return False
    if any(c.isdigit() for c in token) or "_" in token or _DOTTED.search(token):
        return True
    return token.count("/") >= 2 or ("/" in token and "." in token)


def question_names(question: str) -> list[Name]:
    """The names ``question`` asks about, in order (see the module's text for what counts)."""
    found: list[tuple[int, Name]] = []
    spans = [span for span in _CODE_SPAN.finditer(question) if _short_code(span.group(1))]
    for span in spans:  # the writer marked it as code: a name, its words together
        words = tuple(
            word
            for word in query_words(span.group(1))
            if word not in ENGLISH_STOPWORDS and not _QUANTITY.fullmatch(word)
        )
        if words:
            found.append((span.start(), Name(span.group(1).strip(), words, shaped=True)))
    # The rest word by word, short code spans blanked out (same length: positions keep the question's order).
    rest = question
    for span in spans:
        rest = rest[: span.start()] + " " * len(span.group(0)) + rest[span.end() :]
    starts_sentence = True
    for match in re.finditer(r"\S+", rest):
        raw = match.group(0)
        token = raw.strip(_WRAPPING)
        first = starts_sentence
        starts_sentence = raw.rstrip(_CLOSING).endswith((".", "!", "?", ":"))
        token = token.rstrip(".").strip(_WRAPPING)  # a full stop is not part of the name
        token = _POSSESSIVE.sub("", token)  # Dagster's -> Dagster
        if not token or token.lower() in CALENDAR_WORDS:
            continue
        shaped = identifier_shaped(token)
        lettered = token.replace("-", "").isalpha()
        capitalised = lettered and (
            (token[0].isupper() and not first) or bool(_CAMEL.search(token)) or (len(token) > 1 and token.isupper())
        )
        if not (shaped or capitalised):
            continue
        words = tuple(word for word in query_words(token) if word not in ENGLISH_STOPWORDS)
        if words:
            found.append((match.start(), Name(token, words, shaped)))
    return [name for _, name in sorted(found, key=lambda item: item[0])]


def _short_code(text: str) -> bool:
    """A code span that is one name (``qm deploy``), not a pasted line or block whose words are better
    judged one by one: at most three words, on one line."""
    return "\n" not in text and 0 < len(text.split()) <= CODE_SPAN_WORDS


def _plain(word: str) -> str:
    """``word`` without accents (``zürich`` -> ``zurich``), as an uncased vocabulary holds it."""
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))


def unknown_names(
    names: Sequence[Name], chunks_holding: Callable[[str], int], known_words: Collection[str] | None
) -> list[str]:
    """The ``names`` (of a question, :func:`question_names`) that have a word no indexed chunk holds
    (``chunks_holding(word) == 0``).

    ``known_words``: the embedding model's whole words (lowercase); a lettered name made only of such words
    is left to the vector list (accents aside). None: only identifier-shaped names are checked."""
    unknown = []
    for name in names:
        if not name.shaped and (known_words is None or all(_plain(word) in known_words for word in name.words)):
            continue
        if any(chunks_holding(word) == 0 for word in name.words):
            unknown.append(name.text)
    return unknown


# How far down the fused order a memory holding the question's identifiers is looked for (as supersession's
# depth: the first page of hits an agent reads).
NAMED_FIRST_DEPTH = 10


def name_pattern(name: str) -> re.Pattern[str]:
    """``name`` as written in a memory, case aside: a call's ``()`` dropped (``build_filters()`` is also
    ``build_filters(project)``), a path's closing ``/`` too, any run of spaces as one; whole, so ``#2510`` is
    not in ``#25100`` and ``--dry-run`` not in ``--dry-run-all`` (a boundary only where the name has a word
    character or an option's dash at its edge: ``PR#2510`` writes ``#2510``)."""
    core = name.strip()
    core = core[:-2] if core.endswith("()") else core
    core = core.rstrip("/") or core
    body = r"\s+".join(re.escape(part) for part in core.split())
    starts_word, ends_word = re.match(r"\w", core) is not None, re.search(r"\w$", core) is not None
    # An option ends where no word goes on with another dash either (``--dry-run`` is not ``--dry-run-all``);
    # another name may go on with one (``INC-0419`` in ``2025-04-02-INC-0419-duplicate-emails.md``).
    option = core.startswith("-")
    before = r"(?<![\w-])" if option else (r"(?<!\w)" if starts_word else "")
    after = (r"(?![\w-])" if option else r"(?!\w)") if ends_word else ""
    return re.compile(before + body + after, re.IGNORECASE)


def named_first(
    query: str, ranked: Sequence[tuple[int, float]], text_of: Callable[[int], str], depth: int = NAMED_FIRST_DEPTH
) -> list[tuple[int, float]]:
    """``ranked`` with, among its first ``depth``, the candidates whose text writes more of the question's
    identifier-shaped names (``build_filters()``, ``#2510``, ``RetryPolicy.backoff_ms``, ``--dry-run``, a
    short code span) above those that write fewer; otherwise in their order, scores kept.

    The keyword documents give a memory its neighbours' words (docs/eval.md, "Why the recipe works"), so the
    memory next to the one that names an identifier scores about as high on it and the cosine may put it
    first. A question that writes an identifier asks about what names it; the literal name decides between
    them. ``text_of``: a candidate's text, asked only for the first ``depth`` and only when the question writes
    such a name."""
    patterns = [
        name_pattern(text) for text in dict.fromkeys(name.text for name in question_names(query) if name.shaped)
    ]
    if not patterns or len(ranked) < 2:
        return list(ranked)
    head = list(ranked[:depth])
    held = {label: sum(bool(p.search(text_of(label))) for p in patterns) for label, _ in head}
    head.sort(key=lambda item: -held[item[0]])  # stable: equal counts keep the fused order
    return head + list(ranked[depth:])
