"""Secret redaction: API keys, tokens, private keys and passwords are cut out before anything is stored.

Applied to every event when it is appended (content and tool arguments), to every memory when it is
written, and again to whatever the Observer shows a model (defence in depth for rows stored before a
pattern existed). A redaction leaves a marker naming what was removed (``[REDACTED:api_key]``) so the
text still reads sensibly and the Observer can record that a key was used without ever seeing it.

The patterns favour recall over precision for things that look like credentials: a false positive costs a
few characters of context, a false negative leaks a secret into a database and a model provider's logs.
Redaction is deterministic, so the same event always redacts to the same text (idempotent appends stay
idempotent) and redacting twice changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MARK = "[REDACTED:{kind}]"

# Whole PEM blocks (or from BEGIN to the end of the text when the END line is missing).
_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
    r".*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
# scheme://user:password@host -> keep scheme, user and host.
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)(?P<secret>[^\s@/]+)(?P<tail>@)")
# Authorization headers and bearer tokens.
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Basic|Token)\s+)(?P<secret>[A-Za-z0-9._~+/=-]{12,})", re.IGNORECASE)

# Tokens recognisable by their own shape.
_SHAPED: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("api_key", re.compile(r"\bsk-(?:proj-|ant-(?:api\d+-)?|live-|test-)?[A-Za-z0-9_-]{20,}")),
    ("api_key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
)

# name = value, name: value, "name": "value", NAME=value for names that end in a word saying they hold
# a secret (OPENAI_API_KEY, db_password, "client_secret"). The assignment pattern starts at that word,
# not at the start of the name: a lazy name prefix tried at every position of every text was the
# slowest part of an append.
_SECRET_WORD = (
    r"(?:api[_.-]?key|apikey|secret|token|passw(?:or)?d|passphrase|pwd|"
    r"access[_.-]?key|private[_.-]?key|client[_.-]?secret|auth[_.-]?key|credentials?)"
)
_SECRET_NAME = r"(?:[A-Za-z0-9_.-]*?" + _SECRET_WORD + r")"
_ASSIGNMENT = re.compile(
    r"(?P<head>" + _SECRET_WORD + r"[\"']?\s*(?::|=|:=|=>)\s*(?P<vq>[\"']?))"
    r"(?P<secret>[^\s\"',;)}\]]+)",
    re.IGNORECASE,
)
_SECRET_KEY_NAME = re.compile(r"^" + _SECRET_NAME + r"$", re.IGNORECASE)
_ALREADY = re.compile(r"^\[REDACTED:[a-z_]+\]$")


def _looks_secret(value: str) -> bool:
    """An assigned value worth hiding: long, or mixing digits in (``password: required`` is not a secret)."""
    if _ALREADY.match(value) or value.startswith("[REDACTED"):
        return False
    if value.lower() in {"none", "null", "true", "false", "undefined", "redacted", "xxx", "****"}:
        return False
    return len(value) >= 16 or (len(value) >= 6 and any(ch.isdigit() for ch in value))


def _replace_group(kind: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        return match.group("head") + MARK.format(kind=kind) + (match.groupdict().get("tail") or "")

    return replace


def _replace_assignment(match: re.Match[str]) -> str:
    secret = match.group("secret")
    if not _looks_secret(secret):
        return match.group(0)
    return match.group("head") + MARK.format(kind="secret")


# Cheap gates, checked on the lowercased text with C-level substring searches: a pattern runs only when
# a literal it cannot match without is present. Every appended event passes through here, and running
# all the patterns on every text cost more than the rest of an append (regex engines try each position).
_SHAPED_PREFIXES = (
    "sk-",
    "sk_",
    "rk_",
    "pk_",
    "akia",
    "asia",
    "agpa",
    "aida",
    "aroa",
    "anpa",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xox",
    "aiza",
    "hf_",
    "npm_",
    "eyj",
)
_BEARER_WORDS = ("bearer", "basic", "token")
# Where a secret word can start (the first letters of every alternative of _SECRET_WORD).
_SECRET_WORD_STARTS = ("api", "secret", "token", "pass", "pwd", "access", "private", "client", "auth", "credential")


def _redact_assignments(text: str, lower: str) -> str:
    """Apply _ASSIGNMENT only where a secret word starts, found with C-level ``str.find``."""
    starts: set[int] = set()
    for word in _SECRET_WORD_STARTS:
        position = lower.find(word)
        while position != -1:
            starts.add(position)
            position = lower.find(word, position + 1)
    if not starts:
        return text
    pieces: list[str] = []
    done = 0
    for position in sorted(starts):
        if position < done:
            continue
        match = _ASSIGNMENT.match(text, position)
        if match is None:
            continue
        replacement = _replace_assignment(match)
        pieces.append(text[done : match.start()])
        pieces.append(replacement)
        done = match.end()
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def redact_text(text: str) -> str:
    """The text with every recognised secret replaced by a marker."""
    if not text:
        return text
    lower = text.lower()
    if "-----begin" in lower:
        text = _PRIVATE_KEY.sub(MARK.format(kind="private_key"), text)
    if "://" in text and "@" in text:
        text = _URL_PASSWORD.sub(_replace_group("password"), text)
    if any(word in lower for word in _BEARER_WORDS):
        text = _BEARER.sub(_replace_group("token"), text)
    if any(prefix in lower for prefix in _SHAPED_PREFIXES):
        for kind, pattern in _SHAPED:
            text = pattern.sub(MARK.format(kind=kind), text)
    # Earlier replacements only shorten secrets to markers, so recompute the lowercase view first.
    return _redact_assignments(text, text.lower())


def redact_json(value: Any) -> Any:
    """Redact every string in a JSON value; a value under a key that names a secret is hidden whole."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact_json(item) for item in value]
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and _SECRET_KEY_NAME.match(key) and isinstance(item, (str, int)) and item:
                result[key] = item if _ALREADY.match(str(item)) else MARK.format(kind="secret")
            else:
                result[key] = redact_json(item)
        return result
    return value
