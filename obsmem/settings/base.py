"""What every settings section shares: unknown keys are errors, and one check for endpoint base URLs."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A settings section: unknown keys are errors, so a typo never silently does nothing."""

    model_config = ConfigDict(extra="forbid")


def check_base_url(value: str | None, *, key_hint: str) -> str | None:
    """An http(s) endpoint base URL without credentials, query or fragment, trailing ``/`` removed.

    Credentials in a URL would travel wherever the URL is logged or shown, so the key has its own setting;
    ``key_hint`` names that setting in the error. Query strings and fragments would be lost or mangled when
    a path such as ``/chat/completions`` is appended.
    """
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise ValueError(f"must not contain credentials; {key_hint}")
    if parts.query or parts.fragment:
        raise ValueError("must not have a query string or fragment")
    return value.rstrip("/")
