"""Observation and reflection thresholds, relative to the agent model's context window.

Where the window comes from, first match wins: the model's pydantic-ai profile (``model.context_window``),
the capability's ``context_window=``, else none. With a window, the defaults are fractions of it: observe at
30% and reflect at 40% (Mastra's 30,000 / 40,000 tokens for a 100,000-token window), so the projection
and the unobserved tail together stay well inside it. Without one, Mastra's defaults apply as they are.
Background observation is asked for once the unobserved tail reaches a fifth of the observation threshold
(Mastra's buffering interval), so by the time the tail would reach the threshold it is mostly memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from obsmem.errors import ConfigurationError

DEFAULT_OBSERVATION_THRESHOLD = 30_000
DEFAULT_REFLECTION_THRESHOLD = 40_000
OBSERVATION_FRACTION = 0.30
REFLECTION_FRACTION = 0.40
BUFFER_FRACTION = 0.20
MIN_THRESHOLD = 100
MIN_CONTEXT_WINDOW = 1_000
MAX_TOKENS = 100_000_000

WindowSource = Literal["profile", "context_window", "default"]


@dataclass(frozen=True)
class Thresholds:
    """The numbers one model request is measured against (estimated tokens)."""

    observation: int  # unobserved tail that must be observed; the tail the agent sees stays below it
    reflection: int  # active observation tokens that start a Reflector run
    buffer: int  # unobserved tail that asks for background observation now
    context_window: int | None  # the most one request may hold; None: unknown, no overflow check
    source: WindowSource


def check_tokens(name: str, value: object, low: int) -> int | None:
    """A threshold or window the caller gave: None, or an int in ``[low, 100,000,000]``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_TOKENS:
        raise ConfigurationError(f"{name} must be a whole number of tokens from {low:,} to {MAX_TOKENS:,}")
    return value


def resolve_thresholds(
    *,
    profile_window: int | None,
    context_window: int | None,
    observation: int | None,
    reflection: int | None,
) -> Thresholds:
    """The thresholds for a model whose profile says ``profile_window`` (None: unknown)."""
    source: WindowSource
    if profile_window:
        window, source = profile_window, "profile"
    elif context_window:
        window, source = context_window, "context_window"
    else:
        window, source = None, "default"
    if window is None:
        observe = observation or DEFAULT_OBSERVATION_THRESHOLD
        reflect = reflection or DEFAULT_REFLECTION_THRESHOLD
    else:
        observe = observation or max(MIN_THRESHOLD, int(window * OBSERVATION_FRACTION))
        reflect = reflection or max(MIN_THRESHOLD, int(window * REFLECTION_FRACTION))
        if observe + reflect >= window:
            raise ConfigurationError(
                f"observation_threshold ({observe:,}) and reflection_threshold ({reflect:,}) together must stay "
                f"below the context window ({window:,} tokens, from the {source.replace('_', ' ')}): the memory "
                "and the unobserved messages both have to fit in one request"
            )
    return Thresholds(observe, reflect, max(1, int(observe * BUFFER_FRACTION)), window, source)
