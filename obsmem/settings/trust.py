"""`[trust]`: agent-written notes, the judge that rates them and the rule that decides what is injected.

A note is never trusted when it is written; the judge's confidence ``p`` is only evidence, calibrated against
how people resolve judgments (docs/trust.md).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from obsmem.settings.base import Section, check_base_url

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class JudgeSettings(Section):
    """`[trust.judge]`: who rates candidate notes against the searches they turn up in."""

    provider: Literal["none", "http", "model", "human"] = Field(
        default="human",
        description="`http`: POST to `{base_url}/judge`; `model`: the pipeline's `[model]` with a recording tool; "
        "`human`: judgments wait for people; `none`: candidates are never judged.",
    )
    base_url: str | None = Field(default=None, description="`http` only: the judge's base URL (`/judge` is added).")
    api_key_env: str = Field(
        default="OBSMEM_JUDGE_API_KEY",
        description="`http` only: environment variable holding the bearer key (unset: no key is sent).",
    )
    timeout_seconds: float = Field(
        default=10.0, gt=0, le=600, description="`http` and `model`: overall deadline of one judgment call."
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return check_base_url(value, key_hint="set api_key_env instead")

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not _ENV_NAME.fullmatch(value):
            raise ValueError("must be the name of an environment variable (letters, digits and '_')")
        return value

    @model_validator(mode="after")
    def _provider_fields(self) -> JudgeSettings:
        if self.provider == "http" and not self.base_url:
            raise ValueError("provider 'http' needs base_url")
        return self


class TrustSettings(Section):
    """`[trust]`: the decision rule, the judging budget and the groom pass."""

    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    threshold: float = Field(
        default=0.7, ge=0, le=1, description="A judged candidate is injected when its `p` is at least this."
    )
    min_sample: int = Field(
        default=3, ge=0, le=10_000, description="Resolved judgments a tier needs before `p` decides (else escalate)."
    )
    judged_per_search: int = Field(
        default=3, ge=0, le=3, description="Candidates sent to the judge after one search (at most 3; 0: none)."
    )
    groom_max_promotions: int = Field(
        default=50, ge=1, le=50, description="Candidates one groom pass promotes at most."
    )
    groom_seconds: float = Field(
        default=300.0, gt=0, le=86_400, description="How often workers groom every project (scheduled groom)."
    )
    target_precision: float = Field(
        default=0.9, gt=0, le=1, description="`obsmem trust calibrate`: the precision a suggested threshold must meet."
    )
    injected_max: int = Field(
        default=5, ge=0, le=50, description="Judged-relevant candidates shown at most in a session's projection."
    )
