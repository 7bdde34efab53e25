"""The delta Reflector: new reflections only, each citing the active observations it rests on.

The model records reflections through ``record_reflections``. Every item is checked on its own and
answered with a receipt: recorded (with its id), duplicate, or rejected with a reason that says what to
fix. Supporting ids may be written as the 12-character display ids the model was shown or as full ids;
each must name exactly one observation of the active set (unknown, ambiguous, retired ids and reflection
ids are rejected). Nothing is stored here: the accepted reflections go into the generation the run
promotes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from obsmem import ids
from obsmem.pipeline.llm import ChatModel
from obsmem.pipeline.receipts import MAX_ITEMS_PER_CALL, MAX_RECORDED_PER_RUN, OneLine, ReceiptCheck
from obsmem.pipeline.reflect.generations import NewReflection
from obsmem.pipeline.reflect.pool import IdResolver, Pool, PoolObservation
from obsmem.pipeline.reflect.prompts import (
    REFLECTOR_SYSTEM_PROMPT,
    choose_for_reflector,
    data_budget,
    record_reflections_tool,
    reflector_message,
)
from obsmem.pipeline.toolloop import run_tool_loop


def _normal_text(text: str) -> str:
    return " ".join(text.lower().split())


CONTENT = OneLine("the reflection", "separate reflections", "shorten it or split it", reject_control_characters=True)


@dataclass
class ReflectionChecker(ReceiptCheck[NewReflection]):
    """Validates items from ``record_reflections`` calls and remembers the accepted ones."""

    key = "reflections"
    example = '{"reflections": [{"content", "supporting_observation_ids"}, ...]}'
    max_items = MAX_ITEMS_PER_CALL
    max_recorded = MAX_RECORDED_PER_RUN

    pool: Pool
    max_chars: int
    max_ids: int
    accepted: dict[str, NewReflection] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._observations = self.pool.by_id()
        self._resolver = IdResolver(self._observations, (r.memory_id for r in self.pool.reflections))
        self._existing_ids = {r.memory_id for r in self.pool.reflections}
        self._existing_texts = {_normal_text(r.content) for r in self.pool.reflections}

    def file(self, outcome: NewReflection) -> tuple[str, str | None]:
        short = outcome.memory_id[:12]
        text = _normal_text(outcome.content)
        if outcome.memory_id in self.accepted or any(_normal_text(r.content) == text for r in self.accepted.values()):
            return short, "already recorded in this run"
        if outcome.memory_id in self._existing_ids or text in self._existing_texts:
            return short, "an existing reflection says this"
        self.accepted[outcome.memory_id] = outcome
        return short, None

    def check_item(self, item: Any) -> NewReflection | str:
        if not isinstance(item, dict):
            return "each item must be an object with content and supporting_observation_ids"
        unknown_keys = set(item) - {"content", "supporting_observation_ids"}
        if unknown_keys:
            return "each item has only content and supporting_observation_ids"
        content, problem = CONTENT.check(item.get("content"), self.max_chars)
        if content is None:
            return problem or "content is missing"
        raw_ids = item.get("supporting_observation_ids")
        if not isinstance(raw_ids, list) or not raw_ids:
            return "supporting_observation_ids must be a non-empty list of the 12-character observation ids shown"
        if len(raw_ids) > self.max_ids:
            return f"cite at most {self.max_ids} supporting observations; split the reflection"
        supporting: list[PoolObservation] = []
        problems: list[str] = []
        for raw in raw_ids:
            resolved = self._resolver.resolve(raw)
            if resolved.memory_id is None:
                problems.append(resolved.problem or "unknown id")
            else:
                supporting.append(self._observations[resolved.memory_id])
        if problems:
            shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            return f"supporting_observation_ids: {shown}. Resend the item citing only observations listed"
        full_ids = tuple(sorted({o.memory_id for o in supporting}))
        timestamp = max(o.timestamp for o in supporting)
        memory_id = ids.reflection_id(self.pool.session_id, timestamp, content, full_ids)
        return NewReflection(memory_id, content, timestamp, full_ids)


@dataclass
class ReflectorResult:
    reflections: list[NewReflection]
    rounds: int
    rejected: int
    duplicates: int
    stop_reason: str
    prompt_tokens: int
    completion_tokens: int
    shown_tokens: int
    shown_observations: int


def run_reflector(
    client: ChatModel,
    pool: Pool,
    *,
    context_window: int,
    ratio: float,
    reflection_share: float,
    threshold: int,
    max_rounds: int,
    max_chars: int,
    max_ids: int,
) -> ReflectorResult:
    """One Reflector run over the pool (as much of it as fits one request)."""
    tool = record_reflections_tool(max_chars, max_ids)
    budget = data_budget(context_window, ratio, REFLECTOR_SYSTEM_PROMPT, tool)
    shown = choose_for_reflector(pool.reflections, pool.observations, budget, reflection_share)
    checker = ReflectionChecker(pool, max_chars, max_ids)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": REFLECTOR_SYSTEM_PROMPT},
        {"role": "user", "content": reflector_message(pool.session_id, shown, pool.observation_tokens, threshold)},
    ]
    loop = run_tool_loop(client, messages, tool, checker.check_call, max_rounds=max_rounds)
    return ReflectorResult(
        reflections=sorted(checker.accepted.values(), key=lambda r: (r.timestamp, r.memory_id)),
        rounds=loop.rounds,
        rejected=checker.rejected,
        duplicates=checker.duplicates,
        stop_reason=loop.stop_reason,
        prompt_tokens=loop.prompt_tokens,
        completion_tokens=loop.completion_tokens,
        shown_tokens=shown.tokens,
        shown_observations=len(shown.observations),
    )


def citations_with(pool: Pool, reflections: Sequence[NewReflection]) -> dict[str, int]:
    """Observation id -> reflections citing it, counting the run's new reflections too."""
    counts = {o.memory_id: o.citations for o in pool.observations}
    for reflection in reflections:
        for memory_id in reflection.supporting:
            counts[memory_id] = counts.get(memory_id, 0) + 1
    return counts
