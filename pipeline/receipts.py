"""The receipt check every recording tool shares: parse a call, check each item, file it, answer.

The Observer (``record_observations``), the Reflector (``record_reflections``) and the Dropper
(``drop_observations``) each give the model one tool whose arguments are a list of items. A call is
answered with a receipt the model can act on: which items were recorded (with their short ids), which were
duplicates, which were rejected and why. Items are checked one by one, so valid items are kept even when
others in the same call are rejected; arguments that are not JSON, or not a non-empty list, are one
rejected call with an error that shows the expected shape.

:class:`ReceiptCheck` holds that loop and the counts the stage's end event reports. A stage says only what
a valid item is (:meth:`ReceiptCheck.check_item`), where a valid one goes (:meth:`ReceiptCheck.file`) and,
when its receipt reads differently, how it reads (:meth:`ReceiptCheck.reply`).
"""

from __future__ import annotations

import json
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from obsmem.redaction import redact_text
from obsmem.validation import CONTROL_CHARACTERS, LINE_BREAKS

T = TypeVar("T")


def is_repetitive(text: str) -> bool:
    """Degenerate output (the same phrase over and over) compresses far better than any real fact."""
    if len(text) < 200:
        return False
    data = text.encode("utf-8")
    return len(zlib.compress(data)) < len(data) * 0.12


class CheckedText(NamedTuple):
    text: str | None  # the cleaned, redacted line, or None
    problem: str | None  # why not, phrased for the model


# A redaction marker is shorter than most secrets it replaces, so a line a little over the limit may fit
# once redacted; one this many times over the limit is refused as it was sent.
REDACTION_SLACK = 4


@dataclass(frozen=True)
class OneLine:
    """The ``content`` rules a recording tool shares with the others, and how its model is told about them.

    A line of text: present, redacted, one line, within the length limit, not degenerate repetition.
    """

    what: str  # "the fact": what the model should write
    split_into: str  # "separate observations, one fact each": what a multi-line item becomes
    too_long: str  # "shorten it or split it into separate facts"
    reject_control_characters: bool = False

    def check(self, content: Any, max_chars: int) -> CheckedText:
        if not isinstance(content, str) or not content.strip():
            return CheckedText(None, f"content is missing: write {self.what} as one line of text")
        try:
            content.encode("utf-8")  # first: redaction scans the text as UTF-8
        except UnicodeEncodeError:
            return CheckedText(None, "content is not valid UTF-8 text (it holds a lone surrogate): write it again")
        content = content.strip()
        if len(content) > max_chars * REDACTION_SLACK:
            # Refused before redaction, whose cost is not linear on every text: megabytes of a model's reply
            # once kept a worker busy for hours on one item that could never be accepted.
            return CheckedText(None, f"content is {len(content)} characters; the limit is {max_chars}: {self.too_long}")
        content = redact_text(content)
        if LINE_BREAKS.search(content):  # U+2028 and the other separators too, as stored memories refuse
            return CheckedText(None, f"content must be one line: split it into {self.split_into}")
        if self.reject_control_characters and CONTROL_CHARACTERS.search(content):
            return CheckedText(None, "content must not contain control characters")
        if len(content) > max_chars:
            return CheckedText(None, f"content is {len(content)} characters; the limit is {max_chars}: {self.too_long}")
        if is_repetitive(content):
            return CheckedText(None, f"content repeats the same text over and over: write {self.what} once")
        return CheckedText(content, None)


def parse_arguments(arguments: str, key: str, example: str) -> tuple[list[Any] | None, dict[str, Any] | None]:
    """The list under ``key`` in a call's JSON arguments (a bare list is accepted too), or an error result."""
    try:
        document = json.loads(arguments) if arguments.strip() else None
    except json.JSONDecodeError as exc:
        return None, {"error": f"the arguments are not valid JSON ({exc.msg} at character {exc.pos}); send {example}"}
    except RecursionError:
        return None, {"error": f"the arguments are nested too deeply to read; send {example}"}
    except ValueError:  # an integer of more than 4,300 digits, which Python refuses to convert
        return None, {"error": f"the arguments hold a number too long to read; send {example}"}
    if document is not None and not isinstance(document, (dict, list)):
        # JSON of another type at the top level: a string (often the object encoded twice), a number, true.
        what = _JSON_TYPES.get(type(document), "a JSON value")
        return None, {"error": f"the arguments are {what}, not an object; send {example}"}
    items = document.get(key) if isinstance(document, dict) else document
    if not isinstance(items, list) or not items:
        return None, {"error": f"send a non-empty list: {example}"}
    return items, None


_JSON_TYPES = {str: "a JSON string", int: "a JSON number", float: "a JSON number", bool: "a JSON boolean"}


# Far beyond what a chunk of conversation yields (an observation is a line; a chunk is a few thousand
# tokens) or a Reflector condenses, and small enough that a run's commit stays a short transaction.
MAX_ITEMS_PER_CALL = 500
MAX_RECORDED_PER_RUN = 1000


@dataclass
class Receipt:
    """The outcome of one call, item by item (``index`` is the item's place in the call)."""

    recorded: list[dict[str, Any]] = field(default_factory=list)  # {"index", "id"}
    duplicates: list[dict[str, Any]] = field(default_factory=list)  # {"index", "id", "note"}
    rejected: list[dict[str, Any]] = field(default_factory=list)  # {"index", "reason"}


@dataclass
class ReceiptCheck(ABC, Generic[T]):
    """Answers a recording tool's calls with receipts and counts rejected and duplicate items over a run."""

    key: ClassVar[str]  # the arguments' list, e.g. "observations"
    example: ClassVar[str]  # the expected shape, shown when the arguments are unusable
    max_items: ClassVar[int | None] = None  # items read per call (None: all)
    # Items recorded per run (None: no bound). What one run records is committed in one transaction, which
    # every other writer of the project waits for: a model that answers with hundreds of thousands of items
    # would hold the database past the agents' busy timeout, and their appends would fail.
    max_recorded: ClassVar[int | None] = None

    rejected: int = field(default=0, kw_only=True)
    duplicates: int = field(default=0, kw_only=True)
    recorded: int = field(default=0, kw_only=True)

    @abstractmethod
    def check_item(self, item: Any) -> T | str:
        """The valid item, or why it is not valid (phrased for the model: what to fix)."""

    @abstractmethod
    def file(self, outcome: T) -> tuple[str, str | None]:
        """Keep a valid item; returns its short id and a duplicate note (None once it is recorded)."""

    def check_call(self, arguments: str) -> dict[str, Any]:
        """The tool result of one call, as the tool loop sends it back to the model."""
        items, problem = parse_arguments(arguments, self.key, self.example)
        if items is None:
            self.rejected += 1
            return problem or {}
        receipt = Receipt()
        for index, item in enumerate(items[: self.max_items]):
            outcome = self.check_item(item)
            if isinstance(outcome, str):
                receipt.rejected.append({"index": index, "reason": outcome})
                continue
            if self.max_recorded is not None and self.recorded >= self.max_recorded:
                reason = f"this run has recorded {self.max_recorded} items, the most one run keeps: stop here"
                receipt.rejected.append({"index": index, "reason": reason})
                continue
            short, duplicate = self.file(outcome)
            if duplicate is not None:
                receipt.duplicates.append({"index": index, "id": short, "note": duplicate})
            else:
                receipt.recorded.append({"index": index, "id": short})
                self.recorded += 1
        self.rejected += len(receipt.rejected)
        self.duplicates += len(receipt.duplicates)
        return self.reply(receipt, len(items))

    def reply(self, receipt: Receipt, items: int) -> dict[str, Any]:
        """The non-empty parts of the receipt and what the model should do next (``items``: in the call)."""
        result: dict[str, Any] = {
            key: value
            for key, value in (
                ("recorded", receipt.recorded),
                ("duplicates", receipt.duplicates),
                ("rejected", receipt.rejected),
            )
            if value
        }
        result["next"] = (
            "Fix and resend only the rejected items, or reply without a tool call if you are done."
            if receipt.rejected
            else "Record anything else worth keeping, or reply without a tool call if you are done."
        )
        if self.max_items is not None and items > self.max_items:
            result["unread"] = f"only the first {self.max_items} items of a call are read; send the rest in another"
        return result
