"""Stepwise rewards of Crafter achievements: the batch's `simple` and `complex` strategies.

The achievement maps here are synthetic Crafter states (achievement name -> count), read through
the Crafter adapter (`crafter_achievements`) into the batch's tracker.
"""

from __future__ import annotations

import pytest

from rollout_dataset.rewards.config import StepRewardConfig
from rollout_dataset.rewards.stepwise import AchievementTracker
from rollout_dataset.recipes.crafter import ACHIEVEMENTS, crafter_achievements


def _state(**counts: int) -> dict[str, int]:
    state = {name: 0 for name in ACHIEVEMENTS}
    for name, count in counts.items():
        assert name in state, name
        state[name] = count
    return state


def _track(*states: dict[str, int]) -> AchievementTracker:
    tracker = AchievementTracker(crafter_achievements(), initial_state=_state())
    for turn, state in enumerate(states):
        tracker.after_decision(turn, state)
    return tracker


EPISODE = (
    _state(collect_wood=1),                                        # wood
    _state(collect_wood=3),                                        # more wood: nothing new
    _state(collect_wood=3, place_table=1, make_wood_pickaxe=1),    # two at once
    _state(collect_wood=3, place_table=1, make_wood_pickaxe=1),    # idle
    _state(collect_wood=4, place_table=1, make_wood_pickaxe=1, collect_stone=1),
)


def test_the_adapter_reads_positive_counts_as_achieved():
    adapter = crafter_achievements()
    assert adapter.env == "crafter"
    assert list(adapter.catalogue()) == list(ACHIEVEMENTS)
    assert adapter.achieved(_state(collect_wood=2, eat_cow=0)) == frozenset({"collect_wood"})


def test_decision_records_count_what_turned_true_once_per_episode():
    decisions, _ = _track(*EPISODE).stepwise(StepRewardConfig(strategy="simple"))
    assert [d["all"] for d in decisions] == [
        ["collect_wood"], [], ["make_wood_pickaxe", "place_table"], [], ["collect_stone"]]
    assert [d["unique_delta"] for d in decisions] == [1, 0, 2, 0, 1]
    assert [d["turn"] for d in decisions] == [0, 1, 2, 3, 4]


def test_simple_pays_lambda_per_decision_that_unlocks_anything_new():
    decisions, totals = _track(*EPISODE).stepwise(StepRewardConfig(strategy="simple", indicator_lambda=0.5))
    assert [d["reward"] for d in decisions] == [0.5, 0.0, 0.5, 0.0, 0.5]
    assert totals == {"indicator_sum": 3.0, "reward_sum": 1.5, "new_achievements_total": 4}


def test_complex_weighs_each_achievement_and_defaults_to_one():
    config = StepRewardConfig(strategy="complex", weights={"make_wood_pickaxe": 3.0, "collect_stone": 2.0})
    decisions, totals = _track(*EPISODE).stepwise(config)
    assert [d["reward"] for d in decisions] == [1.0, 0.0, 4.0, 0.0, 2.0]
    assert totals["reward_sum"] == 7.0
    assert totals["indicator_sum"] == 3.0


def test_an_achievement_counts_once_per_episode_by_default_even_if_a_counter_resets():
    # a state that loses an achievement (e.g. a replayed or reset counter) and regains it
    states = (_state(eat_cow=1), _state(), _state(eat_cow=2))
    simple, simple_totals = _track(*states).stepwise(StepRewardConfig(strategy="simple"))
    complex_, _ = _track(*states).stepwise(StepRewardConfig(strategy="complex"))
    assert [d["unique_delta"] for d in simple] == [1, 0, 0]
    assert [d["reward"] for d in simple] == [1.0, 0.0, 0.0]
    assert simple_totals["new_achievements_total"] == 1
    assert [d["reward"] for d in complex_] == [1.0, 0.0, 0.0]


def test_complex_k_limits_allow_a_re_unlock_up_to_k_times():
    states = (_state(eat_cow=1), _state(), _state(eat_cow=1), _state(), _state(eat_cow=1))
    config = StepRewardConfig(strategy="complex", weights={"eat_cow": 0.5}, k_limits={"eat_cow": 2})
    decisions, totals = _track(*states).stepwise(config)
    assert [d["reward"] for d in decisions] == [0.5, 0.0, 0.5, 0.0, 0.0]
    assert totals["reward_sum"] == 1.0
    assert totals["new_achievements_total"] == 1  # uniqueness within the episode is unchanged


def test_a_k_limit_of_zero_never_pays():
    config = StepRewardConfig(strategy="complex", k_limits={"collect_wood": 0})
    decisions, _ = _track(*EPISODE).stepwise(config)
    assert decisions[0]["reward"] == 0.0 and decisions[0]["indicator"] == 1


def test_stepwise_off_computes_nothing():
    assert _track(*EPISODE).stepwise(StepRewardConfig(mode="off")) == ([], None)


def test_decision_turns_must_increase():
    tracker = _track(_state(collect_wood=1))
    with pytest.raises(ValueError, match="turn 0 does not follow turn 0"):
        tracker.after_decision(0, _state(collect_wood=1))
