"""Notes as every write makes them: the rules for their text, tier and status, and their identity.

The trust floor (``obsmem/trust/``) stores, judges and promotes notes; these rules sit in the base so that
everything that writes a note row (a save, an update, a restore) checks it the same way. Messages name the
field and the rule, never the text.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from obsmem.errors import ValidationFailed
from obsmem.ids import canonical_json
from obsmem.redaction import redact_text
from obsmem.validation import CONTROL_CHARACTERS, LINE_BREAKS

Tier = Literal["project", "user"]
TIERS: tuple[str, ...] = ("project", "user")
STATUSES: tuple[str, ...] = ("candidate", "trusted", "superseded", "forgotten")
MAX_NOTE_CHARS = 4000
MAX_SITUATION_CHARS = 1000


def note_text(value: object, field: str, *, required: bool) -> str:
    """One line of text, secrets redacted before it can be stored; the message never quotes it. The length
    limit is the caller's (:func:`parse_content`, :func:`parse_situation`)."""
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string", field=field)
    try:
        value.encode("utf-8")  # first: redaction scans the text as UTF-8
    except UnicodeEncodeError:
        raise ValidationFailed(f"{field} is not valid UTF-8 text", field=field) from None
    text = redact_text(value).strip()
    if required and not text:
        raise ValidationFailed(f"{field} must not be empty", field=field)
    if LINE_BREAKS.search(text):
        raise ValidationFailed(f"{field} must be a single line (no line breaks)", field=field)
    if CONTROL_CHARACTERS.search(text):
        raise ValidationFailed(f"{field} must not contain control characters", field=field)
    return text


def _text(value: object, field: str, limit: int, *, required: bool) -> str:
    text = note_text(value, field, required=required)
    if len(text) > limit:
        raise ValidationFailed(f"{field} is longer than {limit} characters", field=field)
    return text


def parse_content(value: object) -> str:
    return _text(value, "content", MAX_NOTE_CHARS, required=True)


def parse_situation(value: object) -> str:
    return _text(value, "situation", MAX_SITUATION_CHARS, required=False)


def parse_tier(value: object) -> str:
    if value is None:
        return "project"
    if value not in TIERS:
        raise ValidationFailed("tier must be 'project' or 'user'", field="tier")
    return str(value)


def parse_status(value: object) -> str | None:
    if value is None:
        return None
    if value not in STATUSES:
        raise ValidationFailed(f"status must be one of {', '.join(STATUSES)}", field="status")
    return str(value)


def note_identity(tier: str, content: str, situation: str, supersedes: str | None) -> str:
    """A note's id: the SHA-256 of what defines it, so saving the same note twice stores it once."""
    document = {"kind": "note", "tier": tier, "content": content, "situation": situation, "supersedes": supersedes}
    return hashlib.sha256(canonical_json(document)).hexdigest()
