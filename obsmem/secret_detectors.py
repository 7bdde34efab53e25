"""The secret detectors :mod:`obsmem.redaction` runs, each a named pattern with a cheap gate.

A detector reports the spans of a text that hold a secret; it never rewrites the text itself, so the
redaction engine can run every detector over one normalised view and map the spans back to the original
(see :mod:`obsmem.redaction`). ``DETECTORS`` is the documented list (docs/redaction.md names each one).

Gates are what keeps redaction affordable on every appended event: one Aho-Corasick pass over the
lowercased text finds every occurrence of every literal some detector cannot match without; a text
holding none is done, a detector runs only when one of its literals occurs, and the detectors that hang
off a word ("password", "secret", "api key", ...) are tried only at the positions where such a word starts
and one combined pattern of them all matches, never at every position of the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ahocorasick_rs import AhoCorasick

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

_LEFT_EDGE = "(?<![A-Za-z0-9])"


# The token patterns without their left edge, by the literals they start with: a token glued to the end of
# another detector's span (``AIza`` and 35 characters, then ``sk-proj-...``) follows a letter or a digit, so
# its own left edge refuses it, and it is tried there by :func:`glued_token_end` instead.
# Keyed by the literal's first letter: most spans end before a character that starts no token (a space, a
# newline), and one lookup there is all the cost.
def _glued_patterns() -> dict[str, list[tuple[str, re.Pattern[str]]]]:
    by_first: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
    for name, _, pattern, literals in _SHAPED:
        if not pattern.pattern.startswith(_LEFT_EDGE):
            raise ValueError(f"token detector {name} does not start with the left edge")
        glued = re.compile(pattern.pattern.removeprefix(_LEFT_EDGE))
        for literal in literals:
            by_first.setdefault(literal[0], []).append((literal, glued))
    return by_first


_GLUED = _glued_patterns()


def glued_token_end(text: str, lower: str, position: int) -> int:
    """Where a token starting at ``position`` ends, for a position right after another detector's span and a
    letter or a digit (which each token's left edge refuses, there to keep tokens from matching inside
    words: "task-..."); ``position`` when none starts there. One match per token literal found there, so
    trying it at the end of every span keeps redaction linear."""
    end = position
    for literal, pattern in _GLUED.get(lower[position], ()):
        if lower.startswith(literal, position):
            match = pattern.match(text, position)
            if match is not None and match.end() > end:
                end = match.end()
    return end


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
_ASSIGNMENT_LEAD = _NOT_PASSWORD_WORD + r"[\"']?\s*(?::|=|:=|=>)\s*[\"']?"
_ASSIGNMENT = re.compile(_ASSIGNMENT_LEAD + r"(?P<secret>[^\s\"',;)}\]]+)", re.IGNORECASE)
_PASSWORD_WORD = r"(?:passw(?:or)?d|passphrase|pwd|(?<=[_.-])pass(?![a-z0-9]))"
# A password value: quoted (spaces allowed), a ``${VAR}`` reference (kept by the value test), or a bare
# run that is not the start of a call or an index (``password=getpass()``, ``os.environ["PW"]``).
_PASSWORD_VALUE = r"(?P<secret>\"[^\"\n]{1,200}\"|'[^'\n]{1,200}'|\$\{[^}\s]*\}|[^\s\"',;()\[\]{}]++(?![(\[{]))"
# PASSWORD=Sunshine, passwd: letmein, DB_PASSWORD="hunter two": a password may be any word, so its value
# is judged like the word after "password is", not by its length.
_PASSWORD_ASSIGNMENT_LEAD = _PASSWORD_WORD + r"[\"']?\s*(?::|=|:=|=>)\s*"
_PASSWORD_ASSIGNMENT = re.compile(_PASSWORD_ASSIGNMENT_LEAD + _PASSWORD_VALUE, re.IGNORECASE)
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
_PROSE_LEAD = (
    r"(?<![a-z0-9])(?:passw(?:or)?d|passphrase|passcode|secret(?:[ _-]?key)?|api[ _-]?key|access[ _-]?key|"
    r"private[ _-]?key|token|credentials?)"
    r"(?:\s+(?:for|of|to|on)\s+(?:the\s+|my\s+|our\s+|your\s+)?[\w.@-]{1,40})?"
    r"\s+(?:is|was):?\s+(?:now\s+|still\s+)?"
)
_PROSE = re.compile(_PROSE_LEAD + r"(?P<secret>\"[^\"\n]{1,200}\"|'[^'\n]{1,200}'|[^\s\"']+)", re.IGNORECASE)
# A bare run of 32-128 hex digits right after a word naming a secret ("webhook secret 3f9a...", "API
# key: 9c1e..."), at most three linking words between. A hex run anywhere else is a hash, a commit or
# an id, and is left alone.
# The separators are taken whole (possessive), and ``=`` and ``:`` are separators, not linking words: as
# both, a run such as ``: : : :`` after a secret word could be split in ways that grow with the seventh
# power of its length, and a few kilobytes of it never finished.
_LINK = r"(?:is|was|are|of|for|the|a|my|our|your|its|this|value|hex|set|to|now|new)"
_HEX_AFTER_WORD = re.compile(
    r"(?<![a-z0-9])(?:secret(?:[ _-]?key)?|api[ _-]?key|access[ _-]?key|private[ _-]?key|signing[ _-]?key|"
    r"hmac[ _-]?key|token|passw(?:or)?d|passphrase|credentials?)"
    r"(?:[\s:=\"'`]++" + _LINK + r"){0,3}[\s:=\"'`]++(?P<secret>[0-9a-f]{32,128})(?![0-9a-z_])",
    re.IGNORECASE,
)

# Where one of the four word detectors' patterns may match: a position where this does not match is one
# where none of them can (see :meth:`Scan.candidates`). The three whose value runs to the next delimiter
# are tested up to the value's first character only (each of their values starts with one that is not
# space): testing the whole value scanned to the end of the run from every secret word inside it, which
# took minutes for a megabyte of ``password=`` over and over.
_ANY_WORD_PATTERN = re.compile(
    "|".join(
        "(?:" + lead + ")"
        for lead in (
            _PASSWORD_ASSIGNMENT_LEAD + r"(?=\S)",
            _ASSIGNMENT_LEAD + r"(?=\S)",
            _PROSE_LEAD + r"(?=\S)",
            _HEX_AFTER_WORD.pattern.replace("(?P<secret>", "(?:"),
        )
    ),
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
# as tool names and argument keys) is done after one search.
NEEDED_LITERALS = (*_SHAPED_PREFIXES, *WORD_STARTS, "-----begin", "://", "bearer", "basic", "-u ", "--user")
# Literals whose positions a detector wants but no text needs (``-u`` starts ``-u admin:pw`` and ``-u=``).
_POSITION_LITERALS = ("-u",)
# One Aho-Corasick automaton finds every occurrence of every literal in one pass over the text (overlapping
# ones too: "secretoken" holds both words), where a substring search per literal made 33 passes and was
# the larger part of redacting a long text.
_LITERALS = tuple(dict.fromkeys((*NEEDED_LITERALS, *_POSITION_LITERALS)))
_LITERAL_SEARCH = AhoCorasick(list(_LITERALS))
_SHAPED_PREFIX_SET = frozenset(_SHAPED_PREFIXES)
_WORD_SET = frozenset(WORD_STARTS)
_NEEDED_SET = frozenset(NEEDED_LITERALS)


class Scan:
    """One text as the detectors see it, with what several detectors need computed once, in one pass:
    where each literal occurs (which token prefixes occur, where secret words start), and the word
    positions where some word detector's pattern can match at all."""

    __slots__ = ("text", "lower", "prefixes", "words", "needed", "_found", "_candidates")

    def __init__(self, text: str, lower: str) -> None:
        self.text = text
        self.lower = lower  # same length as text, so offsets found in one index the other
        self._candidates: list[int] | None = None
        self._found: dict[str, list[int]] = {}
        self.needed = False  # whether any literal that some detector needs occurs: without one, none can match
        self.prefixes: frozenset[str] = frozenset()
        self.words: list[int] = []
        matches = _LITERAL_SEARCH.find_matches_as_indexes(lower, overlapping=True)
        if not matches:  # most short texts: tool names, ids, argument keys
            return
        found = self._found
        for index, start, _ in matches:
            literal = _LITERALS[index]
            if literal in found:
                found[literal].append(start)
            else:
                found[literal] = [start]
        # Matches come in the order they end; the occurrences of one literal (one length) are in order.
        self.needed = not _NEEDED_SET.isdisjoint(found)
        self.prefixes = _SHAPED_PREFIX_SET.intersection(found)
        words = [found[word] for word in _WORD_SET.intersection(found)]
        self.words = words[0] if len(words) == 1 else sorted(position for group in words for position in group)

    def at(self, literal: str) -> list[int]:
        """Where ``literal`` (a word of :data:`WORD_STARTS` or another searched literal) starts, in order."""
        return self._found.get(literal, [])

    def candidates(self) -> list[int]:
        """The word positions where at least one word detector's pattern matches, in order.

        A word detector tried at a position where its pattern does not match finds nothing there, so
        trying it only at these positions finds the same spans; one match of the combined pattern per
        word replaces one match per detector per word (most words in prose and code start no secret).
        """
        if self._candidates is None:
            match = _ANY_WORD_PATTERN.match
            text = self.text
            self._candidates = [position for position in self.words if match(text, position) is not None]
        return self._candidates


Find = Callable[[Scan], list[Span]]


def _private_key(scan: Scan) -> list[Span]:
    if not scan.at("-----begin"):
        return []
    return [match.span() for match in _PRIVATE_KEY.finditer(scan.text)]


def _url_password(scan: Scan) -> list[Span]:
    """What ``_URL_PASSWORD.finditer`` finds, tried only from each ``://``: a ``finditer`` read a dotted run
    (``a.b.c...``) to its end from every word boundary in it, for minutes per megabyte."""
    if not scan.at("://") or "@" not in scan.text:
        return []
    text = scan.text
    spans: list[Span] = []
    done = 0
    for separator in scan.at("://"):
        if separator < done:
            continue
        start = _scheme_start(text, separator, done)
        if start is None:
            continue
        match = _URL_PASSWORD.match(text, start)
        if match is not None:
            spans.append(match.span("secret"))
            done = match.end()
    return spans


_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _scheme_start(text: str, separator: int, floor: int) -> int | None:
    """The leftmost start, at or after ``floor``, of a scheme ending at ``separator`` (where ``finditer``
    would start the match): a letter at a word boundary, then scheme characters up to the ``://``."""
    start = separator
    while start > floor and text[start - 1] in _SCHEME_CHARS:
        start -= 1
    for position in range(start, separator):
        if text[position] in _LETTERS and (position == 0 or not _is_word_char(text[position - 1])):
            return position
    return None


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


# The scheme pattern is case-sensitive: at a "token" that is not spelt one of these ways it cannot match.
_SCHEME_SPELLINGS = ("Bearer", "bearer", "BEARER", "Basic", "BASIC", "Token", "TOKEN")


def _bearer(scan: Scan) -> list[Span]:
    """Tried only where a scheme word (spelt as a scheme is) or ``authorization`` starts: a ``finditer``
    of the scheme pattern over every text holding "token" was the costliest detector of an append."""
    lower, text = scan.lower, scan.text
    spans: list[Span] = []
    done = 0  # a header deep inside a value already taken hides nothing more: not tried (see _TAKEN_LEAD)
    for position in scan.at("auth"):
        if position < done - _TAKEN_LEAD or not lower.startswith("authorization", position):
            continue
        start = position - 6 if lower.endswith("proxy-", 0, position) else position
        match = _AUTH_HEADER.match(text, start)
        if match is not None and _long_or(_credential_shaped, match["secret"]):
            spans.append(match.span("secret"))
            done = match.end()
    for word in ("bearer", "basic", "token"):
        done = 0
        for position in scan.at(word):
            if position < done - _TAKEN_LEAD or not text.startswith(_SCHEME_SPELLINGS, position):
                continue
            match = _BEARER.match(text, position)
            # Judged at any length, unlike a header's value: a scheme word's value, which no space ends, holds no
            # other scheme word's value, so none is judged twice; and ``Token`` is a secret word too, whose
            # assignment (``Token =<value>(...``) hides a long value whole, judged or not.
            if match is not None and _credential_shaped(match["secret"]):
                spans.append(match.span("secret"))
                done = match.end()
    return spans


# How far before the end of a value already taken a header or option inside it may start and still have a
# value of its own after it: all of its lead before its value must lie inside the taken value, and the
# longest such lead is ``proxy-authorization=digest`` (26 characters; ``--user=`` and ``Bearer`` are
# shorter), its spaces, quote or colon falling just past the end (``xyz.Bearer tok...``,
# ``b/-u c:hunter22``). One starting further back has its value inside the taken one, hiding nothing more;
# retrying only the last few keeps a megabyte of ``authorization=`` over and over linear.
_TAKEN_LEAD = 32


def _long_or(judge: Callable[[str], bool], value: str) -> bool:
    """Whether ``value`` is hidden: judged by ``judge`` unless it is over :data:`LONG_VALUE` characters."""
    return len(value) > LONG_VALUE or judge(value)


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
    for position in sorted(scan.at("pass") + scan.at("pwd")):
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
    # An option inside a password already taken hides nothing more, unless the text holds markers: a span over a
    # marker is dropped (see find_secrets), and the option inside it must then be found.
    skip_taken = "[REDACTED:" not in text
    done = 0
    for position in scan.at("-u"):
        if position < done - _TAKEN_LEAD:
            continue
        match = _USER_OPTION.match(text, position - 1 if lower.startswith("--user", position - 1) else position)
        if match is None or (match["user"].isdigit() and match["secret"].isdigit()):
            continue  # docker run -u 1000:1000 is a uid and a gid
        if _long_or(_prose_value_is_secret, match["secret"]):
            spans.append(match.span("secret"))
            done = match.end() if skip_taken else 0
    return spans


def _shaped(pattern: re.Pattern[str], literals: tuple[str, ...]) -> Find:
    """A token detector: every match of ``pattern`` starts with one of its ``literals`` (in some case), so
    it is tried only where the scan found one, left to right and never inside a match already taken,
    which finds what ``finditer`` over the whole text finds (a ``finditer`` over a long tool output
    tried the pattern, lookbehind first, at every character)."""

    def find(scan: Scan) -> list[Span]:
        groups = [positions for literal in literals if (positions := scan.at(literal))]
        starts = groups[0] if len(groups) == 1 else sorted(position for group in groups for position in group)
        text = scan.text
        spans: list[Span] = []
        done = 0
        for position in starts:
            if position < done:
                continue
            match = pattern.match(text, position)
            if match is not None:
                spans.append(match.span())
                done = match.end()
        return spans

    return find


# A value this long after a secret word is hidden without judging it. Judging reads the whole value, and a
# value that is kept runs to the same delimiter from every secret word inside it: a megabyte of
# ``password=<`` over and over was judged from each of them and took half an hour. No placeholder, type
# name or English word (what judging lets through) is this long.
LONG_VALUE = 256


def _at_words(pattern: re.Pattern[str], keep: Callable[[str], bool], *, trim: bool) -> Find:
    """A detector that tries ``pattern`` only where a secret word starts; ``keep`` judges the value.

    ``trim`` drops sentence punctuation after an unquoted value (prose ends sentences; an assigned value
    is taken whole, as it always was, so texts stored earlier redact the same way).
    """

    def find(scan: Scan) -> list[Span]:
        positions = scan.candidates()
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
            if value and (len(value) > LONG_VALUE or keep(value)):
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


# In priority order: where detectors claim overlapping text, their union is hidden, under the kind of the
# span that starts first, and at the same start of the detector listed first.
DETECTORS: tuple[Detector, ...] = (
    Detector("private_key", "private_key", _private_key),
    Detector("url_password", "password", _url_password),
    Detector("bearer_token", "token", _bearer),
    *(
        Detector(name, kind, _shaped(pattern, literals), frozenset(literals))
        for name, kind, pattern, literals in _SHAPED
    ),
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
