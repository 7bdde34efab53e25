"""Notes as every write makes them: the rules for their text, tier and status, and their identity.

The trust floor (``obsmem/trust/``) stores, judges and promotes notes; these rules sit in the base so that
everything that writes a note row (a save, an update, a restore) checks it the same way. Messages name the
field and the rule, never the text.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from obsmem.errors import ValidationFailed
from obsmem.ids import canonical_json, display_id
from obsmem.redaction import redact_text
from obsmem.validation import CONTROL_CHARACTERS, LINE_BREAKS

Tier = Literal["project", "user"]
TIERS: tuple[str, ...] = ("project", "user")
STATUSES: tuple[str, ...] = ("candidate", "trusted", "superseded", "forgotten")
MAX_NOTE_CHARS = 4000
MAX_SITUATION_CHARS = 1000
# A judgment's id as every judgment is made (obsmem/trust/judging.py): 'j' and 16 lowercase hex characters.
JUDGMENT_ID = re.compile(r"j[0-9a-f]{16}")
# The pipeline event the judging job logs in the transaction that records each judgment
# (obsmem/trust/judging.py), and a project's copy of a user-tier judgment's entry.
JUDGMENT_EVENT = "trust_judgment"


def judgment_event_data(
    judgment_id: str, note_id: str, tier: str, p: float | None, decision: str, error: str | None
) -> dict[str, Any]:
    """What a ``trust_judgment`` event logs of its judgment: ids, numbers and the error's code and own
    message only, never the note or the query."""
    data: dict[str, Any] = {"judgment_id": judgment_id, "note_id": display_id(note_id), "tier": tier}
    data["decision"] = decision
    data["p"] = p
    if error is not None:
        data["error"] = error
    return data


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


# A trusted note's standing, as groom grants it (obsmem/trust/groom.py): in one transaction the note becomes
# trusted and the ledger gets a 'promoted' entry citing the judgment of it that resolved true. A forget ends
# that trust, and only a promotion after the note's latest 'forgotten' entry counts. The judgment itself may
# come from before that forget: obsmem before the 'resaved' entry promoted a note saved again on such a
# judgment, and those ledgers are honest history.
_UNPROMOTED_TRUSTED = """
SELECT n.note_id FROM notes AS n WHERE n.status = 'trusted' AND NOT EXISTS (
    SELECT 1 FROM trust_ledger AS l JOIN judgments AS j ON j.judgment_id = l.judgment_id
     WHERE l.note_id = n.note_id AND l.entry = 'promoted'
       AND j.note_id = n.note_id AND j.state = 'resolved' AND j.outcome = 1
       AND l.id > coalesce((SELECT max(f.id) FROM trust_ledger AS f
                             WHERE f.note_id = n.note_id AND f.entry = 'forgotten'), 0))
"""


def trusted_without_promotion(conn: Any) -> list[str]:
    """The ids of notes marked trusted that no promotion in the ledger accounts for (none, where every
    trust came from groom): a write never grants trust, so such a note was made trusted by hand."""
    return [str(note_id) for (note_id,) in conn.execute(_UNPROMOTED_TRUSTED).fetchall()]
