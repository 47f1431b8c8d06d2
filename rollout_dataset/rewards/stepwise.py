"""Decision-stepwise rewards: achievements unlocked at each agent decision.

The environment-specific part — what an achievement is — sits behind `EnvironmentAchievements`:
an environment lists its achievement names and says which are achieved in a given state. For a
coding task the achievements are the visible examples and the state is the agent's working
directory (`rollout_dataset.recipes.coding.replay`); for a Crafter-like game the state is the achievement
counter (`CounterAchievements`). Everything else here is environment-free and pure.

Definitions, per decision `t` (an agent turn that changed or ran the solution), with `A_t` the
achievements true after it, `A_{t-1}` before it and `S` those seen true earlier in the episode:

- `all`    = sorted(A_t - A_{t-1}), what turned true at this decision (`ach_delta` = its length);
- `unique` = sorted(all - S), what is true for the first time in the episode (`unique_delta`);
- `indicator` = 1 if `unique` is non-empty else 0 (the same for every strategy);
- `simple`:  reward = indicator_lambda * indicator — re-passing an example after breaking it earns
  nothing, so oscillating edits are not rewarded;
- `complex`: for each name in `all`, while it has counted fewer than `k_limits[name]` (default 1)
  times this episode, add `weights[name]` (default 1.0) — so k > 1 deliberately pays for re-unlocks.

Totals: `indicator_sum` = sum of indicators, `reward_sum` = sum of rewards,
`new_achievements_total` = sum of `unique_delta` (distinct achievements reached).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from rollout_dataset.rewards.config import StepRewardConfig

__all__ = [
    "AchievementSnapshot",
    "EnvironmentAchievements",
    "AchievementTracker",
    "CounterAchievements",
    "decision_records",
    "simple_rewards",
    "complex_rewards",
    "stepwise_for_rollout",
    "timeline_to_json",
    "timeline_from_json",
]


@dataclass(frozen=True)
class AchievementSnapshot:
    """The achievements true right after one decision.

    Attributes:
        turn: the agent turn (0-based assistant turn index) of the decision.
        achieved: names of the achievements true in the state after it.
    """

    turn: int
    achieved: frozenset[str]


@runtime_checkable
class EnvironmentAchievements(Protocol):
    """What an achievement is, for one environment family.

    Attributes:
        env: the environment family's name (e.g. `coding`, `crafter`).
    """

    env: str

    def catalogue(self) -> Sequence[str]:
        """All achievement names of this episode (e.g. `example_1`, `example_2`)."""
        ...

    def achieved(self, state: Any) -> frozenset[str]:
        """The achievements true in `state` (a working directory, a game state, ...)."""
        ...


class CounterAchievements:
    """Achievements of a Crafter-like game: the state maps achievement name -> count (or bool).

    Args:
        names: the achievement catalogue (e.g. Crafter's 22 achievements).
        env: the environment family name.
    """

    def __init__(self, names: Iterable[str], env: str = "crafter") -> None:
        self.env = env
        self._names = tuple(names)

    def catalogue(self) -> Sequence[str]:
        """All achievement names."""
        return self._names

    def achieved(self, state: Mapping[str, Any]) -> frozenset[str]:
        """Names whose count is positive (or true) in `state`."""
        return frozenset(name for name, value in state.items() if value)


class AchievementTracker:
    """Follows one episode: call `after_decision` after each agent decision.

    Args:
        environment: the environment's achievement definition.
        initial_state: the state before the first decision (None: nothing achieved).
    """

    def __init__(self, environment: EnvironmentAchievements, initial_state: Any = None) -> None:
        self.environment = environment
        self.initial: frozenset[str] = (
            frozenset() if initial_state is None else frozenset(environment.achieved(initial_state))
        )
        self._timeline: list[AchievementSnapshot] = []

    @property
    def timeline(self) -> list[AchievementSnapshot]:
        """The snapshots recorded so far, in decision order."""
        return list(self._timeline)

    def after_decision(self, turn: int, state: Any) -> dict[str, Any]:
        """Record the state after a decision.

        Args:
            turn: the agent turn of the decision; turns must increase.
            state: the environment state after it.

        Returns:
            The decision record `{turn, ach_delta, unique_delta, all, unique}` of this decision.

        Raises:
            ValueError: `turn` does not increase.
        """
        if self._timeline and turn <= self._timeline[-1].turn:
            raise ValueError(f"turn {turn} does not follow turn {self._timeline[-1].turn}")
        self._timeline.append(AchievementSnapshot(int(turn), frozenset(self.environment.achieved(state))))
        return decision_records(self._timeline, initial=self.initial)[-1]

    def stepwise(self, config: StepRewardConfig) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """`stepwise_for_rollout` over the timeline so far."""
        return stepwise_for_rollout(self._timeline, config, initial=self.initial)


def decision_records(
    timeline: Sequence[AchievementSnapshot], initial: Iterable[str] = frozenset()
) -> list[dict[str, Any]]:
    """The per-decision records of one episode.

    Args:
        timeline: snapshots in decision order.
        initial: achievements true before the first decision.

    Returns:
        One `{turn, ach_delta, unique_delta, all, unique}` per snapshot (see the module docstring).
    """
    previous = frozenset(initial)
    seen = set(previous)
    records = []
    for snap in timeline:
        turned_true = snap.achieved - previous
        unique = turned_true - seen
        records.append(
            {
                "turn": int(snap.turn),
                "ach_delta": len(turned_true),
                "unique_delta": len(unique),
                "all": sorted(turned_true),
                "unique": sorted(unique),
            }
        )
        seen |= turned_true
        previous = snap.achieved
    return records


def simple_rewards(records: Sequence[Mapping[str, Any]], indicator_lambda: float = 1.0) -> list[float]:
    """`simple` strategy: `indicator_lambda` at each decision that unlocks something new, else 0.

    Args:
        records: decision records from `decision_records`.
        indicator_lambda: reward per indicator.

    Returns:
        One reward per record.
    """
    return [float(indicator_lambda) if r["unique_delta"] > 0 else 0.0 for r in records]


def complex_rewards(
    records: Sequence[Mapping[str, Any]],
    weights: Mapping[str, float] | None = None,
    k_limits: Mapping[str, int] | None = None,
) -> list[float]:
    """`complex` strategy: weighted achievements, each counted at most its k-limit per episode.

    Args:
        records: decision records from `decision_records`.
        weights: name -> weight (1.0 when absent).
        k_limits: name -> how many times it may count this episode (1 when absent).

    Returns:
        One reward per record.
    """
    weights = weights or {}
    k_limits = k_limits or {}
    counts: dict[str, int] = {}
    rewards = []
    for record in records:
        reward = 0.0
        for name in record["all"]:
            if counts.get(name, 0) < int(k_limits.get(name, 1)):
                reward += float(weights.get(name, 1.0))
                counts[name] = counts.get(name, 0) + 1
        rewards.append(reward)
    return rewards


def stepwise_for_rollout(
    achievement_timeline: Sequence[AchievementSnapshot],
    config: StepRewardConfig,
    initial: Iterable[str] = frozenset(),
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Step rewards of one rollout under one configuration.

    Args:
        achievement_timeline: snapshots in decision order.
        config: the step-reward block (its `strategy` decides the rewards).
        initial: achievements true before the first decision.

    Returns:
        `(decisions, totals)`: decisions are the records of `decision_records` plus `indicator`
        (0/1) and `reward`; totals are `{indicator_sum, reward_sum, new_achievements_total}`.
        When the block is not active (disabled or mode `off`) the result is `([], None)`.
    """
    if not config.active:
        return [], None
    records = decision_records(achievement_timeline, initial=initial)
    if config.strategy == "simple":
        rewards = simple_rewards(records, config.indicator_lambda)
    else:
        rewards = complex_rewards(records, config.weights, config.k_limits)
    decisions = []
    for record, reward in zip(records, rewards):
        decisions.append({**record, "indicator": 1 if record["unique_delta"] > 0 else 0, "reward": reward})
    totals = {
        "indicator_sum": float(sum(d["indicator"] for d in decisions)),
        "reward_sum": float(sum(rewards)),
        "new_achievements_total": int(sum(d["unique_delta"] for d in decisions)),
    }
    return decisions, totals


def timeline_to_json(timeline: Sequence[AchievementSnapshot]) -> list[dict[str, Any]]:
    """Snapshots as JSON-ready `{turn, achieved}` items (achieved sorted)."""
    return [{"turn": s.turn, "achieved": sorted(s.achieved)} for s in timeline]


def timeline_from_json(items: Sequence[Mapping[str, Any]]) -> list[AchievementSnapshot]:
    """Inverse of `timeline_to_json`."""
    return [AchievementSnapshot(int(i["turn"]), frozenset(i["achieved"])) for i in items]
