"""The bounded Dropper: the model proposes, deterministic code ranks and caps.

The model proposes observations to retire through ``drop_observations``; each id is checked (it must
name one observation of the active set) and answered with a receipt. At the end of the run the server
ranks every accepted proposal — strongly covered before partly covered before not covered, low importance
before critical, oldest first — and retires proposals in that order only until the pool is back under
``pools.observations_max_tokens``: however many ids the model proposes, no more are retired than the
overage needs. Retired observations leave the active memory only; they stay searchable and recallable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from obsmem.pipeline.llm import ChatModel
from obsmem.pipeline.receipts import Receipt, ReceiptCheck
from obsmem.pipeline.reflect.generations import Drop, NewReflection
from obsmem.pipeline.reflect.pool import IdResolver, Pool, PoolObservation, PoolReflection
from obsmem.pipeline.reflect.prompts import (
    DROPPER_SYSTEM_PROMPT,
    choose_for_dropper,
    data_budget,
    drop_observations_tool,
    drop_rank,
    dropper_message,
)
from obsmem.pipeline.tokens import token_cost
from obsmem.pipeline.toolloop import run_tool_loop

MAX_IDS_PER_CALL = 2000
REFLECTION_SHARE = 0.3  # of a request's memory budget, for the reflections that cover what may go


def rank_and_cap(
    proposals: Iterable[PoolObservation], citations: dict[str, int], pool_tokens: float, target: int
) -> list[Drop]:
    """The drops to make: proposals in the server's order, only until the pool is at or under ``target``."""
    excess = pool_tokens - target
    if excess <= 0:
        return []
    ranked = sorted((o._replace(citations=citations.get(o.memory_id, o.citations)) for o in proposals), key=drop_rank)
    drops: list[Drop] = []
    freed = 0.0
    for rank, observation in enumerate(ranked):
        if freed >= excess:
            break
        drops.append(Drop(observation, rank, observation.citations))
        freed += observation.tokens
    return drops


@dataclass
class DropChecker(ReceiptCheck[PoolObservation]):
    """Validates ids from ``drop_observations`` calls and collects the proposals.

    Its receipt lists the accepted ids as ``proposed`` (the server decides what is retired) and says how
    far the proposals go against the pool's overage.
    """

    key = "observation_ids"
    example = '{"observation_ids": ["a1b2c3d4e5f6", ...]}'
    max_items = MAX_IDS_PER_CALL

    observations: dict[str, PoolObservation]
    reflection_ids: Sequence[str]
    pool_tokens: float
    target: int
    proposals: dict[str, PoolObservation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._resolver = IdResolver(self.observations, self.reflection_ids)

    def check_item(self, item: Any) -> PoolObservation | str:
        resolved = self._resolver.resolve(item)
        if resolved.memory_id is None:
            return resolved.problem or "unknown id"
        return self.observations[resolved.memory_id]

    def file(self, outcome: PoolObservation) -> tuple[str, str | None]:
        self.proposals[outcome.memory_id] = outcome
        return outcome.memory_id[:12], None

    def reply(self, receipt: Receipt, items: int) -> dict[str, Any]:
        proposed_tokens = sum(o.tokens for o in self.proposals.values())
        over = max(0.0, self.pool_tokens - self.target)
        result: dict[str, Any] = {}
        if receipt.recorded:
            result["proposed"] = [entry["id"] for entry in receipt.recorded]
        if receipt.rejected:
            result["rejected"] = receipt.rejected
        if items > MAX_IDS_PER_CALL:
            result["ignored"] = f"only the first {MAX_IDS_PER_CALL} ids of a call are read"
        result["status"] = (
            f"{len(self.proposals)} observations proposed (~{round(proposed_tokens):,} tokens); the pool is over "
            f"budget by ~{round(over):,} tokens. The server retires proposals in its own order only until the "
            "pool is under budget."
        )
        result["next"] = (
            "Fix the rejected ids, propose more that are safe to retire, or reply without a tool call if you are done."
            if receipt.rejected or proposed_tokens < over
            else "Reply without a tool call if you are done."
        )
        return result


@dataclass
class DropperResult:
    drops: list[Drop]
    proposed: int
    rejected: int
    rounds: int
    stop_reason: str
    prompt_tokens: int
    completion_tokens: int
    shown_observations: int


def run_dropper(
    client: ChatModel,
    pool: Pool,
    new_reflections: Sequence[NewReflection],
    citations: dict[str, int],
    *,
    target: int,
    context_window: int,
    ratio: float,
    max_rounds: int,
) -> DropperResult:
    """One Dropper run: the model proposes, then :func:`rank_and_cap` decides."""
    observations = [o._replace(citations=citations.get(o.memory_id, o.citations)) for o in pool.observations]
    by_id = {o.memory_id: o for o in observations}
    reflections = list(pool.reflections) + [
        PoolReflection(-1, r.memory_id, r.timestamp, r.content, token_cost(r.content)) for r in new_reflections
    ]
    tool = drop_observations_tool()
    budget = data_budget(context_window, ratio, DROPPER_SYSTEM_PROMPT, tool)
    shown = choose_for_dropper(
        reflections, observations, budget, REFLECTION_SHARE, frozenset(r.memory_id for r in new_reflections)
    )
    pool_tokens = sum(o.tokens for o in observations)
    checker = DropChecker(by_id, [r.memory_id for r in reflections], pool_tokens, target)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": DROPPER_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": dropper_message(
                pool.session_id, shown, round(pool_tokens), target, [r.memory_id for r in new_reflections]
            ),
        },
    ]
    loop = run_tool_loop(client, messages, tool, checker.check_call, max_rounds=max_rounds)
    drops = rank_and_cap(checker.proposals.values(), citations, pool_tokens, target)
    return DropperResult(
        drops=drops,
        proposed=len(checker.proposals),
        rejected=checker.rejected,
        rounds=loop.rounds,
        stop_reason=loop.stop_reason,
        prompt_tokens=loop.prompt_tokens,
        completion_tokens=loop.completion_tokens,
        shown_observations=len(shown.observations),
    )
