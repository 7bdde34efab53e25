"""The secret redaction as it was before its fast path: the reference the fast path must equal.

A frozen copy of ``obsmem.secret_detectors`` and ``obsmem.redaction`` taken before the detectors were
gated by one combined scan per text. ``tests/test_redaction_equivalence.py`` checks that the shipped
redaction finds exactly the spans this one finds, on the redaction corpus and on random text with
embedded secrets. Never edited to follow the shipped code: a detector change that alters what is found
must change the corpus and this copy together, on purpose (as when overlapping spans came to be hidden as
their union, where the span that started first used to win alone, when a token glued to a span's end
came to be hidden with it, and when redact_text came to pass over its own output again, which hides a lead
glued to a span's end).
"""

# ruff: noqa
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

Span = tuple[int, int]

# Whole PEM blocks (or from BEGIN to the end of the text when the END line is missing).
_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
    r".*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
# scheme://user:password@host -> keep scheme, user and host.
_URL_PASSWORD = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:(?P<secret>[^\s@/]+)@")
# Authorization headers and bearer tokens. The scheme words are also English ("a basic understanding",
# "token counting"), so a value counts only when it is shaped like a credential (see
# :func:`_credential_shaped`): after an ``Authorization:`` header name from 8 characters, after a bare
# ``Bearer``/``Basic``/``Token`` (capitalised as a scheme is, or in capitals) from 12.
_CREDENTIAL = r"(?P<secret>[A-Za-z0-9._~+/=-]{8,})"
_AUTH_HEADER = re.compile(
    r"(?<![a-z0-9-])(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?" + _CREDENTIAL,
    re.IGNORECASE,
)
_BEARER = re.compile(
    r"(?<![A-Za-z0-9])(?:[Bb]earer|BEARER|Basic|BASIC|Token|TOKEN)\s+(?P<secret>[A-Za-z0-9._~+/=-]{12,})"
)

# Tokens recognisable by their own shape: (detector name, marker kind, pattern, literals one of which it
# needs to be present). A token may follow an underscore (``run_with_ghp_...``, ``MY_AKIA...``), so the
# left edge is "no letter or digit before", not a regex word boundary.
_SHAPED: tuple[tuple[str, str, re.Pattern[str], tuple[str, ...]], ...] = (
    (
        "sk_dash_key",
        "api_key",
        re.compile(r"(?<![A-Za-z0-9])sk-(?:proj-|ant-(?:api\d+-)?|live-|test-)?[A-Za-z0-9_-]{20,}"),
        ("sk-",),
    ),
    (
        "stripe_style_key",
        "api_key",
        re.compile(r"(?<![A-Za-z0-9])(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"),
        ("sk_", "rk_", "pk_"),
    ),
    (
        "aws_access_key_id",
        "aws_access_key",
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}(?![0-9A-Za-z])"),
        ("akia", "asia", "agpa", "aida", "aroa", "anpa"),
    ),
    (
        "github_token",
        "github_token",
        re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    ("gitlab_token", "gitlab_token", re.compile(r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}"), ("glpat-",)),
    ("slack_token", "slack_token", re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"), ("xox",)),
    ("google_api_key", "google_api_key", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"), ("aiza",)),
    ("huggingface_token", "huggingface_token", re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"), ("hf_",)),
    ("npm_token", "npm_token", re.compile(r"(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36}"), ("npm_",)),
    (
        "jwt",
        "jwt",
        re.compile(r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        ("eyj",),
    ),
)

# A word saying that what follows holds a secret (OPENAI_API_KEY, db_password, "client_secret", DB_PASS).
# ``pass`` alone counts only as the last part of a longer name (DB_PASS, --pass): "PASS: test_login" is
# test output, not a credential.
SECRET_WORD = (
    r"(?:api[ _.-]?key|apikey|secret|token|passw(?:or)?d|passphrase|pwd|(?<=[_.-])pass(?![a-z0-9])|"
    r"access[_.-]?key|private[_.-]?key|client[_.-]?secret|auth[_.-]?key|credentials?)"
)
# Where such a word can start (the first letters of every alternative of the word patterns below).
WORD_STARTS = (
    "api",
    "secret",
    "token",
    "pass",
    "pwd",
    "access",
    "private",
    "client",
    "auth",
    "credential",
    "signing",
    "hmac",
)

# name = value, name: value, "name": "value", NAME=value. The pattern starts at the secret word, not at
# the start of the name: a lazy name prefix tried at every position of every text was the slowest part
# of an append.
# Password names are judged apart (``_PASSWORD_ASSIGNMENT``): a password is often a plain word.
_NOT_PASSWORD_WORD = (
    r"(?:api[ _.-]?key|apikey|secret|token|"
    r"access[_.-]?key|private[_.-]?key|client[_.-]?secret|auth[_.-]?key|credentials?)"
)
_ASSIGNMENT = re.compile(
    _NOT_PASSWORD_WORD + r"[\"']?\s*(?::|=|:=|=>)\s*[\"']?(?P<secret>[^\s\"',;)}\]]+)",
    re.IGNORECASE,
)
_PASSWORD_WORD = r"(?:passw(?:or)?d|passphrase|pwd|(?<=[_.-])pass(?![a-z0-9]))"
# A password value: quoted (spaces allowed), a ``${VAR}`` reference (kept by the value test), or a bare
# run that is not the start of a call or an index (``password=getpass()``, ``os.environ["PW"]``).
_PASSWORD_VALUE = r"(?P<secret>\"[^\"\n]{1,200}\"|'[^'\n]{1,200}'|\$\{[^}\s]*\}|[^\s\"',;()\[\]{}]++(?![(\[{]))"
# PASSWORD=Sunshine, passwd: letmein, DB_PASSWORD="hunter two": a password may be any word, so its value
# is judged like the word after "password is", not by its length.
_PASSWORD_ASSIGNMENT = re.compile(
    _PASSWORD_WORD + r"[\"']?\s*(?::|=|:=|=>)\s*" + _PASSWORD_VALUE,
    re.IGNORECASE,
)
# Command-line options: ``--password hunter2xyz``, ``--db-pass 'a b'`` (the ``=`` form is an assignment).
_PASSWORD_OPTION = re.compile(
    r"(?<![A-Za-z0-9-])--?(?:[A-Za-z0-9]+[_-])*(?:passw(?:or)?d|passphrase|pwd|pass)[ \t]+" + _PASSWORD_VALUE,
    re.IGNORECASE,
)
# ``curl -u admin:hunter22``, ``--user admin:hunter22``: the password after the user name.
_USER_OPTION = re.compile(
    r"(?<![A-Za-z0-9-])(?:-u|--user)(?:[ \t]+|=)[\"']?(?P<user>[^\s:\"'@/]+):(?P<secret>[^\s\"'@]+)"
)
# Prose: "my password is hunter2", "the API key for staging was 'a b c'". Only "is"/"was": a colon or an
# equals sign is an assignment (above), with its own test of the value.
_PROSE = re.compile(
    r"(?<![a-z0-9])(?:passw(?:or)?d|passphrase|passcode|secret(?:[ _-]?key)?|api[ _-]?key|access[ _-]?key|"
    r"private[ _-]?key|token|credentials?)"
    r"(?:\s+(?:for|of|to|on)\s+(?:the\s+|my\s+|our\s+|your\s+)?[\w.@-]{1,40})?"
    r"\s+(?:is|was):?\s+(?:now\s+|still\s+)?"
    r"(?P<secret>\"[^\"\n]{1,200}\"|'[^'\n]{1,200}'|[^\s\"']+)",
    re.IGNORECASE,
)
# A bare run of 32-128 hex digits right after a word naming a secret ("webhook secret 3f9a...", "API
# key: 9c1e..."), at most three linking words between. A hex run anywhere else is a hash, a commit or
# an id, and is left alone.
# On purpose: the same language as before, written so that a long run of separators cannot backtrack for
# hours (``=`` and ``:`` are separators, taken whole, not linking words too).
_LINK = r"(?:is|was|are|of|for|the|a|my|our|your|its|this|value|hex|set|to|now|new)"
_HEX_AFTER_WORD = re.compile(
    r"(?<![a-z0-9])(?:secret(?:[ _-]?key)?|api[ _-]?key|access[ _-]?key|private[ _-]?key|signing[ _-]?key|"
    r"hmac[ _-]?key|token|passw(?:or)?d|passphrase|credentials?)"
    r"(?:[\s:=\"'`]++" + _LINK + r"){0,3}[\s:=\"'`]++(?P<secret>[0-9a-f]{32,128})(?![0-9a-z_])",
    re.IGNORECASE,
)

_PLACEHOLDERS = {"none", "null", "nil", "true", "false", "undefined", "redacted", "xxx", "****", "changeme"}
# Words that follow "password is" in ordinary prose ("the password is required"): a value that is one of
# these, or an all-lowercase word ending in -ed, -ing or -ly, is English, not a secret.
_PROSE_WORD_LIST = """
    a an the this that these those it its not no none null nil empty blank missing required optional mandatory
    needed necessary incorrect correct wrong invalid valid expired revoked rotated changed reset set unset
    stored saved kept hashed encrypted encoded redacted hidden masked secret private public too very now still
    also already being in on at of for from to with by as via under inside only never always same different
    weak strong short long good bad ok okay fine safe unsafe there here what which where when how why who
    sent used generated provided configured given shown printed logged checked verified accepted rejected
    defined specified available unavailable out known unknown right compromised leaked exposed due about just
    probably likely usually typically supposed meant displayed read loaded passed managed handled one your my
    our his her their mine yours identical longer shorter case ignored applied included removed deleted
    created updated refreshed renewed issued granted attached added more less all any each every some both
    either neither so quite really actually then if because and or but case-sensitive unchanged different
    ready fixed broken stale old new fresh current temporary permanent random unique default
    flag option argument parameter switch field prompt value variable
"""
_PROSE_WORDS = frozenset(_PROSE_WORD_LIST.split())
_ENGLISH_SUFFIX = re.compile(r"[a-z]+(?:ed|ing|ly)")
# ``if token is other_token:``, ``while secret is self.pending``: an identity test in code, not prose.
_CODE_NAME = re.compile(r"[a-z_][a-z_]*(?:[._][a-z_]+)+:?")


def _assigned_value_is_secret(value: str) -> bool:
    """An assigned value worth hiding: long, or mixing digits in (``password: required`` is not a secret)."""
    if value.startswith("[REDACTED") or value.lower() in _PLACEHOLDERS:
        return False
    return len(value) >= 16 or (len(value) >= 6 and any(ch.isdigit() for ch in value))


# ``password=password``, ``password=db_password``: a lowercase identifier naming a password passes a
# variable on; ``password: str``: a type hint. Neither is a secret.
_PASSWORD_IDENTIFIER = re.compile(r"[a-z_]*(?:passw(?:or)?d|passphrase|pwd|pass)[a-z_]*")
_TYPE_NAMES = frozenset({"str", "string", "bytes", "int", "secretstr", "secretbytes", "optional", "any", "none"})


def _password_value_is_secret(value: str) -> bool:
    """An assigned password: judged like prose (``password = Sunshine`` is a secret, ``password: required``
    is not), but a variable named like a password or a type name is code, not a value."""
    if _PASSWORD_IDENTIFIER.fullmatch(value) or value.split("[", 1)[0].split("|", 1)[0].lower() in _TYPE_NAMES:
        return False
    return _prose_value_is_secret(value)


def _credential_shaped(value: str) -> bool:
    """A value after an auth scheme that looks issued, not written: digits mixed with letters, or capitals
    inside lowercase as base64 has (``dXNlcjpwYXNz``). "Basic troubleshooting" has neither."""
    letters = [char for char in value if char.isalpha()]
    if not letters:
        return False
    if any(char.isdigit() for char in value):
        return True
    return any(char.islower() for char in letters) and any(char.isupper() for char in letters[1:])


def _prose_value_is_secret(value: str) -> bool:
    """The word after "password is": anything but English and placeholders (``<your password>``)."""
    if value.startswith(("[REDACTED", "<", "${", "{{")) or value.lower() in _PLACEHOLDERS:
        return False
    if value.lower() in _PROSE_WORDS or _CODE_NAME.fullmatch(value):
        return False
    return not (value.islower() and _ENGLISH_SUFFIX.fullmatch(value))


_SHAPED_PREFIXES = tuple(prefix for _, _, _, literals in _SHAPED for prefix in literals)
# Every literal some detector cannot match without: a text holding none of them (most short texts, such
# as tool names and argument keys) is done after one regex search.
ANY_NEEDED_LITERAL = re.compile(
    "|".join(
        re.escape(literal)
        for literal in (*_SHAPED_PREFIXES, *WORD_STARTS, "-----begin", "://", "bearer", "basic", "-u ", "--user")
    )
)


class Scan:
    """One text as the detectors see it, with what several detectors need computed once: which token
    prefixes occur and where secret words start."""

    __slots__ = ("text", "lower", "prefixes", "words")

    def __init__(self, text: str, lower: str) -> None:
        self.text = text
        self.lower = lower  # same length as text, so offsets found in one index the other
        # One C-level substring search per prefix measured faster than a regex of all of them.
        self.prefixes = frozenset(prefix for prefix in _SHAPED_PREFIXES if prefix in lower)
        self.words = _word_positions(lower)


def _word_positions(lower: str) -> list[int]:
    """Where a secret word may start, in order (the only places the word detectors are tried);
    ``str.find`` per word measured faster than one regex of all of them."""
    starts: set[int] = set()
    for word in WORD_STARTS:
        position = lower.find(word)
        while position != -1:
            starts.add(position)
            position = lower.find(word, position + 1)
    return sorted(starts)


Find = Callable[[Scan], list[Span]]


def _private_key(scan: Scan) -> list[Span]:
    if "-----begin" not in scan.lower:
        return []
    return [match.span() for match in _PRIVATE_KEY.finditer(scan.text)]


def _url_password(scan: Scan) -> list[Span]:
    if "://" not in scan.text or "@" not in scan.text:
        return []
    return [match.span("secret") for match in _URL_PASSWORD.finditer(scan.text)]


def _positions(lower: str, word: str) -> list[int]:
    """Every start of ``word`` in ``lower`` (C-level ``str.find``)."""
    found: list[int] = []
    position = lower.find(word)
    while position != -1:
        found.append(position)
        position = lower.find(word, position + 1)
    return found


def _bearer(scan: Scan) -> list[Span]:
    """Tried only where a scheme word or ``authorization`` starts: a ``finditer`` of the scheme pattern
    over every text holding "token" was the costliest detector of an append."""
    lower, text = scan.lower, scan.text
    spans: list[Span] = []
    for pattern, words in ((_AUTH_HEADER, ("authorization",)), (_BEARER, ("bearer", "basic", "token"))):
        for word in words:
            for position in _positions(lower, word):
                start = position - 6 if word == "authorization" and lower.endswith("proxy-", 0, position) else position
                match = pattern.match(text, start)
                if match is not None and (
                    (pattern is _AUTH_HEADER and len(match["secret"]) > 256) or _credential_shaped(match["secret"])
                ):  # on purpose: a header's long values unjudged
                    spans.append(match.span("secret"))
    return spans


def _option_start(lower: str, position: int) -> int:
    """Where the command-line option holding ``position`` starts (``--db-password`` from "password")."""
    start = position
    while start > 0 and (lower[start - 1].isalnum() or lower[start - 1] in "_-") and position - start < 64:
        start -= 1
    return start


def _password_options(scan: Scan) -> list[Span]:
    """``--password VALUE`` and ``-u user:password``. Tried only at an option starting with "-" that
    holds a password word, and where ``-u``/``--user`` occurs, never over the whole text."""
    lower, text = scan.lower, scan.text
    spans: list[Span] = []
    tried: set[int] = set()
    for position in scan.words:
        if not lower.startswith(("pass", "pwd"), position):
            continue
        start = _option_start(lower, position)
        if start in tried or lower[start] != "-":
            continue
        tried.add(start)
        match = _PASSWORD_OPTION.match(text, start)
        if match is None:
            continue
        start, end = match.span("secret")
        value = match["secret"]
        if value[:1] in "\"'" and len(value) > 1 and value[-1] == value[0]:
            value, start, end = value[1:-1], start + 1, end - 1
        if value and _password_value_is_secret(value):
            spans.append((start, end))
    for position in _positions(lower, "-u"):
        match = _USER_OPTION.match(text, position - 1 if lower.startswith("--user", position - 1) else position)
        if match is None or (match["user"].isdigit() and match["secret"].isdigit()):
            continue  # docker run -u 1000:1000 is a uid and a gid
        if len(match["secret"]) > 256 or _prose_value_is_secret(match["secret"]):  # on purpose, as above
            spans.append(match.span("secret"))
    return spans


def _shaped(pattern: re.Pattern[str]) -> Find:
    def find(scan: Scan) -> list[Span]:
        return [match.span() for match in pattern.finditer(scan.text)]

    return find


def _at_words(pattern: re.Pattern[str], keep: Callable[[str], bool], *, trim: bool) -> Find:
    """A detector that tries ``pattern`` only where a secret word starts; ``keep`` judges the value.

    ``trim`` drops sentence punctuation after an unquoted value (prose ends sentences; an assigned value
    is taken whole, as it always was, so texts stored earlier redact the same way).
    """

    def find(scan: Scan) -> list[Span]:
        positions = scan.words
        text = scan.text
        spans: list[Span] = []
        done = 0
        for position in positions:
            if position < done:
                continue
            match = pattern.match(text, position)
            if match is None:
                continue
            value = match.group("secret")
            start, end = match.span("secret")
            if value[:1] in "\"'" and len(value) > 1 and value[-1] == value[0]:
                value, start, end = value[1:-1], start + 1, end - 1
            elif trim:
                trimmed = value.rstrip(".,;:!?")
                end -= len(value) - len(trimmed)
                value = trimmed
            if value and (len(value) > 256 or keep(value)):  # on purpose: a long value is hidden unjudged
                spans.append((start, end))
                done = match.end()
        return spans

    return find


@dataclass(frozen=True)
class Detector:
    """One documented detector: its name, the marker kind it leaves, what it finds."""

    name: str
    kind: str
    find: Find  # the spans of scan.text to replace
    # Checked by the engine once per text for all detectors, rather than by each detector (calling every
    # detector on every text showed in the ingest profile): token prefixes one of which must occur, and
    # whether the detector hangs off a secret word.
    prefixes: frozenset[str] = frozenset()
    at_words: bool = False


# In priority order: where two detectors claim overlapping text, the span that starts first wins, and at
# the same start the detector listed first.
DETECTORS: tuple[Detector, ...] = (
    Detector("private_key", "private_key", _private_key),
    Detector("url_password", "password", _url_password),
    Detector("bearer_token", "token", _bearer),
    *(Detector(name, kind, _shaped(pattern), frozenset(literals)) for name, kind, pattern, literals in _SHAPED),
    Detector(
        "password_assignment",
        "secret",
        _at_words(_PASSWORD_ASSIGNMENT, _password_value_is_secret, trim=False),
        at_words=True,
    ),
    Detector("password_option", "password", _password_options),
    Detector("assignment", "secret", _at_words(_ASSIGNMENT, _assigned_value_is_secret, trim=False), at_words=True),
    Detector("prose_password", "secret", _at_words(_PROSE, _prose_value_is_secret, trim=True), at_words=True),
    Detector(
        "hex_after_secret_word", "secret", _at_words(_HEX_AFTER_WORD, lambda value: True, trim=False), at_words=True
    ),
)

SECRET_KEY_NAME = re.compile(r"^(?:[A-Za-z0-9_.-]*?" + SECRET_WORD + r"|pass)$", re.IGNORECASE)


# --- obsmem.redaction ---

from bisect import bisect_right
from typing import Any


MARK = "[REDACTED:{kind}]"
_MARKER = re.compile(r"\[REDACTED:[a-z_]+\]")
_ALREADY = re.compile(r"^\[REDACTED:[a-z_]+\]$")

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
    lower = _lowercase_same_length(view)
    if ANY_NEEDED_LITERAL.search(lower) is None:
        return []
    scan = Scan(view, lower)
    claims: list[tuple[int, int, int, str]] = []
    for priority, detector in _PRIORITIES:
        if (detector.prefixes and scan.prefixes.isdisjoint(detector.prefixes)) or (
            detector.at_words and not scan.words
        ):
            continue
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
    # A token glued to a span's end after a letter or a digit (``AIza`` and 35 characters, then ``sk-proj-...``),
    # which its left edge refuses, is hidden with the span, and so is what is glued to its own end.
    spans: list[list[Any]] = []
    for start, _, end, kind in claims:
        if spans and start >= spans[-1][1]:
            _extend_by_glued_tokens(spans[-1], view)
        if spans and start < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end, kind])
    if spans:
        _extend_by_glued_tokens(spans[-1], view)
    if shifts is None:
        return [(start, end, kind) for start, end, kind in spans]
    return [(_original_index(start, shifts), _original_index(end - 1, shifts) + 1, kind) for start, end, kind in spans]


_GLUED = [re.compile(pattern.pattern.removeprefix("(?<![A-Za-z0-9])")) for _, _, pattern, _ in _SHAPED]


def _extend_by_glued_tokens(span: list[Any], view: str) -> None:
    while span[1] < len(view) and re.match(r"[A-Za-z0-9]", view[span[1] - 1]):
        ends = [match.end() for pattern in _GLUED if (match := pattern.match(view, span[1])) is not None]
        if not ends:
            return
        span[1] = max(ends)


def redact_text(text: str) -> str:
    """The text with every recognised secret replaced by a marker, pass after pass over the output until one
    finds nothing (at most three)."""
    redacted = _replace_secrets(text)
    for _ in range(2):
        if redacted is text:
            break
        text, redacted = redacted, _replace_secrets(redacted)
    return redacted


def _replace_secrets(text: str) -> str:
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


def secret_kind(value: str) -> str | None:
    """What kind of secret ``value`` holds (the first one found), or None: for identifiers that are refused
    rather than redacted."""
    found = find_secrets(value)
    return found[0][2] if found else None


def is_secret_key_name(key: str) -> bool:
    """Whether ``key`` names a secret (``api_key``, ``token``, ``password``): a value under such a name is
    hidden whole even when the value alone does not look like a credential."""
    view, _ = _matching_view(key)
    return SECRET_KEY_NAME.match(view) is not None


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
