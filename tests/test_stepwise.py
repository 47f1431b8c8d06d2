"""Step rewards: decision records, the simple and complex strategies, the config block, the tracker."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.batch import (
    AchievementSnapshot,
    AchievementTracker,
    CounterAchievements,
    EnvironmentAchievements,
    StepRewardConfig,
    complex_rewards,
    decision_records,
    load_step_config,
    simple_rewards,
    stepwise_for_rollout,
)
from rollout_dataset.batch.config import load_json_mapping, parse_seeds
from rollout_dataset.errors import ConfigError


def timeline(*sets: set[str], start_turn: int = 0) -> list[AchievementSnapshot]:
    return [AchievementSnapshot(start_turn + i, frozenset(s)) for i, s in enumerate(sets)]


# example_1 passes at turn 0, example_2 joins at turn 1, a bad edit breaks both at turn 2,
# the fix at turn 3 makes both pass again, turn 4 changes nothing.
OSCILLATING = timeline({"example_1"}, {"example_1", "example_2"}, set(), {"example_1", "example_2"}, {"example_1", "example_2"})


def test_decision_records_count_turned_true_and_first_time_separately():
    records = decision_records(OSCILLATING)
    assert [r["turn"] for r in records] == [0, 1, 2, 3, 4]
    assert [r["ach_delta"] for r in records] == [1, 1, 0, 2, 0]
    assert [r["unique_delta"] for r in records] == [1, 1, 0, 0, 0]
    assert records[3]["all"] == ["example_1", "example_2"]
    assert records[3]["unique"] == []
    assert records[1]["unique"] == ["example_2"]


def test_decision_records_respect_the_initial_state():
    records = decision_records(timeline({"a", "b"}), initial={"a"})
    assert records[0]["all"] == ["b"] and records[0]["unique"] == ["b"]


def test_simple_pays_lambda_once_per_decision_that_unlocks_something_new():
    rewards = simple_rewards(decision_records(OSCILLATING), indicator_lambda=0.5)
    assert rewards == [0.5, 0.5, 0.0, 0.0, 0.0]


def test_simple_pays_one_indicator_for_several_examples_at_one_decision():
    rewards = simple_rewards(decision_records(timeline({"a", "b", "c"})), indicator_lambda=2.0)
    assert rewards == [2.0]


def test_complex_uses_weights_and_defaults_unlisted_names_to_one():
    records = decision_records(timeline({"a"}, {"a", "b"}))
    assert complex_rewards(records, weights={"a": 0.25}) == [0.25, 1.0]


def test_complex_k_limit_one_counts_each_example_once_per_episode():
    assert complex_rewards(decision_records(OSCILLATING), weights={"example_1": 1.0, "example_2": 3.0}) == [1.0, 3.0, 0.0, 0.0, 0.0]


def test_complex_k_limit_two_pays_a_re_unlock_once_more():
    rewards = complex_rewards(decision_records(OSCILLATING), weights={"example_2": 3.0}, k_limits={"example_1": 2, "example_2": 2})
    assert rewards == [1.0, 3.0, 0.0, 4.0, 0.0]


def test_complex_k_limit_zero_never_pays():
    assert complex_rewards(decision_records(timeline({"a"})), k_limits={"a": 0}) == [0.0]


def test_stepwise_for_rollout_totals_and_per_decision_fields():
    cfg = StepRewardConfig(strategy="complex", weights={"example_2": 3.0}, k_limits={"example_2": 2})
    decisions, totals = stepwise_for_rollout(OSCILLATING, cfg)
    assert totals == {"indicator_sum": 2.0, "reward_sum": 1.0 + 3.0 + 3.0, "new_achievements_total": 2}
    assert [d["indicator"] for d in decisions] == [1, 1, 0, 0, 0]
    assert [d["reward"] for d in decisions] == [1.0, 3.0, 0.0, 3.0, 0.0]
    assert set(decisions[0]) == {"turn", "ach_delta", "unique_delta", "all", "unique", "indicator", "reward"}


def test_stepwise_for_rollout_simple_reward_sum_is_lambda_times_indicators():
    decisions, totals = stepwise_for_rollout(OSCILLATING, StepRewardConfig(strategy="simple", indicator_lambda=0.3))
    assert totals["reward_sum"] == pytest.approx(0.6)
    assert totals["indicator_sum"] == 2.0


@pytest.mark.parametrize("block", [{"enabled": False}, {"mode": "off"}])
def test_inactive_block_gives_no_decisions_and_no_totals(block):
    assert stepwise_for_rollout(OSCILLATING, StepRewardConfig(**block)) == ([], None)


def test_empty_timeline_gives_zero_totals():
    assert stepwise_for_rollout([], StepRewardConfig())[1] == {"indicator_sum": 0.0, "reward_sum": 0.0, "new_achievements_total": 0}


def test_tracker_with_counter_achievements_plugs_in_a_game_environment():
    env = CounterAchievements(["collect_wood", "place_table", "collect_diamond"], env="crafter")
    assert isinstance(env, EnvironmentAchievements)
    tracker = AchievementTracker(env)
    r0 = tracker.after_decision(0, {"collect_wood": 1, "place_table": 0})
    r1 = tracker.after_decision(1, {"collect_wood": 3, "place_table": 1})
    assert r0 == {"turn": 0, "ach_delta": 1, "unique_delta": 1, "all": ["collect_wood"], "unique": ["collect_wood"]}
    assert r1["unique"] == ["place_table"]
    _, totals = tracker.stepwise(StepRewardConfig(strategy="complex", weights={"place_table": 0.5}))
    assert totals == {"indicator_sum": 2.0, "reward_sum": 1.5, "new_achievements_total": 2}


def test_tracker_refuses_turns_that_do_not_increase():
    tracker = AchievementTracker(CounterAchievements(["a"]))
    tracker.after_decision(3, {"a": 1})
    with pytest.raises(ValueError, match="turn 3 does not follow turn 3"):
        tracker.after_decision(3, {"a": 1})


def test_step_config_from_toml_under_rollout_env_config(tmp_path):
    path = tmp_path / "rl.toml"
    path.write_text(
        '[rollout.env_config.step_rewards]\nenabled = true\nmode = "decision_stepwise"\nstrategy = "complex"\n'
        'indicator_lambda = 0.5\nweights = { example_1 = 0.1, example_2 = 2 }\nk_limits = { example_2 = 3 }\n'
    )
    cfg = load_step_config(path)
    assert cfg == StepRewardConfig(True, "decision_stepwise", "complex", 0.5, {"example_1": 0.1, "example_2": 2.0}, {"example_2": 3})


def test_step_config_from_json_top_level_block(tmp_path):
    path = tmp_path / "step.json"
    path.write_text(json.dumps({"step_rewards": {"strategy": "simple", "indicator_lambda": 2}}))
    cfg = load_step_config(path)
    assert cfg.strategy == "simple" and cfg.indicator_lambda == 2.0 and cfg.active


def test_step_config_unknown_key_names_the_file_and_the_key(tmp_path):
    path = tmp_path / "step.json"
    path.write_text(json.dumps({"step_rewards": {"k_limit": {"a": 1}}}))
    with pytest.raises(ConfigError, match=r"step\.json: unknown step_rewards key\(s\) k_limit"):
        load_step_config(path)


@pytest.mark.parametrize(
    "block, match",
    [
        ({"mode": "dense"}, "mode: 'dense' is not one of off, decision_stepwise"),
        ({"strategy": "fancy"}, "strategy: 'fancy' is not one of simple, complex"),
        ({"k_limits": {"a": -1}}, r"k_limits\.a: expected an integer >= 0"),
        ({"weights": {"a": "heavy"}}, r"weights\.a: expected a finite number"),
    ],
)
def test_step_config_bad_values_are_refused_with_the_valid_range(tmp_path, block, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"step_rewards": block}))
    with pytest.raises(ConfigError, match=match):
        load_step_config(path)


def test_step_config_invalid_toml_is_a_clear_error(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[step_rewards\n")
    with pytest.raises(ConfigError, match="broken.toml: not valid TOML"):
        load_step_config(path)


def test_weights_json_file_is_read_and_checked(tmp_path):
    good = tmp_path / "w.json"
    good.write_text('{"example_1": 0.5}')
    assert load_json_mapping(good, "weights") == {"example_1": 0.5}
    bad = tmp_path / "k.json"
    bad.write_text('{"example_1": 1.5}')
    with pytest.raises(ConfigError, match="example_1: expected an integer >= 0"):
        load_json_mapping(bad, "k_limits")


def test_parse_seeds_accepts_lists_and_ranges_and_refuses_junk():
    assert parse_seeds("0,1,5") == [0, 1, 5]
    assert parse_seeds("3-5,1,3") == [3, 4, 5, 1]
    with pytest.raises(ConfigError, match="'x' is not an integer"):
        parse_seeds("1,x")
