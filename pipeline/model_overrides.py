"""Model switching at run time: per project and role (observer, reflector, dropper), stored in the database.

``PUT /v1/projects/{project}/models`` and ``obsmem models`` write a role's override; the next job of that
role reads it when it starts (a running job keeps the model it started with). Only the model id (and the
context window that goes with it) can be switched: the endpoint and its key come from the settings file,
so a caller of the API can never send the configured key to another host. Every change is logged as an
``om_model_changed`` event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

import apsw
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from obsmem.dates import now_iso
from obsmem.errors import ValidationFailed
from obsmem.settings import ModelSettings, Settings
from obsmem.validation import first_problem, secret_free_identifier
from obsmem.work import eventlog

ROLES: tuple[str, ...] = ("observer", "reflector", "dropper")
MODEL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,199}$"
_MODEL_ID = re.compile(MODEL_ID_PATTERN)


class RoleModel(BaseModel):
    """The model a role switches to."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model_id: str = Field(
        pattern=MODEL_ID_PATTERN,
        description="The `model` sent to the configured endpoint (letters, digits and `._:/@+=-`, at most 200).",
    )
    # The same bounds as the `[model]` setting it replaces, taken from there so the two never drift apart.
    context_window_tokens: Annotated[int | None, *ModelSettings.model_fields["context_window_tokens"].metadata] = Field(
        default=None, description="The new model's context window; unset keeps the configured one."
    )
    # A model id is stored, shown by `obsmem models` and published in the `om_model_changed` event: a key
    # pasted into the wrong field is refused (naming the field, never the value) rather than kept.
    _secret_free = field_validator("model_id")(secret_free_identifier)


class ModelChanges(BaseModel):
    """Roles to switch: an object switches the role, `null` returns it to the settings, absent leaves it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    observer: RoleModel | None = None
    reflector: RoleModel | None = None
    dropper: RoleModel | None = None

    def changes(self) -> dict[str, RoleModel | None]:
        return {role: getattr(self, role) for role in ROLES if role in self.model_fields_set}


def parse_changes(body: object) -> dict[str, RoleModel | None]:
    """Validate a request body; errors name the field (``reflector.model_id``) and never echo the value."""
    if isinstance(body, ModelChanges):
        parsed = body
    else:
        if not isinstance(body, dict):
            raise ValidationFailed("the body must be an object with observer, reflector and/or dropper", field="body")
        try:
            parsed = ModelChanges.model_validate(body)
        except ValidationError as exc:
            raise first_problem(exc, "") from None
    changes = parsed.changes()
    if not changes:
        raise ValidationFailed("name at least one role: observer, reflector or dropper", field="body")
    return changes


@dataclass(frozen=True)
class Override:
    role: str
    model_id: str
    context_window_tokens: int | None
    updated_at: str


def read_overrides(conn: apsw.Connection) -> dict[str, Override]:
    rows = conn.execute("SELECT role, model_id, context_window_tokens, updated_at FROM model_overrides").fetchall()
    return {
        str(role): Override(str(role), str(model_id), int(window) if window is not None else None, str(at))
        for role, model_id, window, at in rows
    }


def model_with_override(settings: Settings, role: str, override: Override | None) -> ModelSettings:
    """The role's model settings from the file, with the run-time switch applied."""
    model = settings.model_for(role)
    if override is None:
        return model
    update: dict[str, Any] = {"model_id": override.model_id}
    if override.context_window_tokens is not None:
        update["context_window_tokens"] = override.context_window_tokens
    return model.model_copy(update=update)


def effective_models(settings: Settings, overrides: dict[str, Override]) -> dict[str, dict[str, Any]]:
    """What each role's next job will use, and where it comes from (``settings`` or ``override``)."""
    result: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        override = overrides.get(role)
        model = model_with_override(settings, role, override)
        result[role] = {
            "model_id": model.model_id,
            "context_window_tokens": model.context_window_tokens,
            "source": "override" if override else "settings",
            "updated_at": override.updated_at if override else None,
        }
    return result


def apply_changes(conn: apsw.Connection, settings: Settings, changes: dict[str, RoleModel | None]) -> list[str]:
    """Store the changes inside the caller's write transaction; log one event per role that changed."""
    before = read_overrides(conn)
    changed: list[str] = []
    stamp = now_iso()
    for role, wanted in changes.items():
        old = before.get(role)
        if wanted is None:
            if old is None:
                continue
            conn.execute("DELETE FROM model_overrides WHERE role = ?", (role,))
        else:
            if not _MODEL_ID.fullmatch(wanted.model_id):  # RoleModel checked it; the CLI builds one directly
                raise ValidationFailed(f"{role}.model_id is not a valid model id", field=f"{role}.model_id")
            if old is not None and (old.model_id, old.context_window_tokens) == (
                wanted.model_id,
                wanted.context_window_tokens,
            ):
                continue
            conn.execute(
                "INSERT INTO model_overrides(role, model_id, context_window_tokens, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(role) DO UPDATE SET model_id = excluded.model_id,"
                " context_window_tokens = excluded.context_window_tokens, updated_at = excluded.updated_at",
                (role, wanted.model_id, wanted.context_window_tokens, stamp),
            )
        previous = model_with_override(settings, role, old)
        now = model_with_override(
            settings,
            role,
            None if wanted is None else Override(role, wanted.model_id, wanted.context_window_tokens, stamp),
        )
        eventlog.record(
            conn,
            "om_model_changed",
            data={
                "role": role,
                "model_id": now.model_id,
                "previous_model_id": previous.model_id,
                "context_window_tokens": now.context_window_tokens,
                "source": "settings" if wanted is None else "override",
            },
        )
        changed.append(role)
    return changed
