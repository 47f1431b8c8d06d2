"""One Crafter episode through the recording proxy, and the harness's edges, on real loopback servers."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.backend import make_policy, run_backend_in_thread
from rollout_dataset.recipes.crafter import (
    ACHIEVEMENTS,
    CrafterAgent,
    CrafterRolloutConfig,
    CrafterWorld,
    run_crafter_rollout,
)
from rollout_dataset.errors import UpstreamStatusError

SMALL = (32, 32)


def _read(folder, name):
    return json.loads((folder / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    out = tmp_path_factory.mktemp("crafter") / "rollout"
    result = run_crafter_rollout(CrafterRolloutConfig(out_dir=out, seed=1, max_steps=40, max_turns=12, area=SMALL,
                                                      api_key="sk-crafter-test-SECRET-0123456789"))
    return out, result


def test_one_short_episode_writes_every_artifact_and_they_validate(episode):
    out, result = episode
    assert result.validation_failures == [] and result.errors == []  # capture ran validate_path itself
    for name in ("trace.json", "rollout.json", "turns.json", "task.json", "visible_tests.txt",
                 "held_out_tests.json", "summary.json", "samples.md", "achievements.json"):
        assert (out / name).is_file(), name


def test_an_environment_without_tests_writes_empty_test_files_not_missing_ones(episode):
    out, _ = episode
    assert (out / "visible_tests.txt").read_text(encoding="utf-8") == ""
    held = _read(out, "held_out_tests.json")
    assert held["tests"] == [] and held["task_id"] == "crafter-seed-1"
    summary = _read(out, "summary.json")
    assert summary["held_out_tests"] == 0 and summary["held_out_passed"] is None


def test_task_json_holds_the_env_name_seed_and_config(episode):
    task = _read(episode[0], "task.json")
    assert task["env"] == "crafter" and task["dataset_seed"] == 1 and task["task_id"] == "crafter-seed-1"
    config = task["config"]
    assert config["seed"] == 1 and config["max_steps"] == 40 and config["max_turns"] == 12
    assert config["area"] == [32, 32] and config["policy"] == "crafter"
    assert "Crafter step 0 of 40" in task["instruction"]


def test_every_model_call_is_captured_with_the_servers_token_ids(episode):
    out, _ = episode
    trace = _read(out, "trace.json")
    summary = _read(out, "summary.json")
    assert summary["captured_calls"] == len(trace["calls"]) == summary["agent_turns"] >= 3
    assert all(c["capture_level"] == "tokens" and c["completion_token_ids"] for c in trace["calls"])
    assert summary["capture_level"] == "tokens" and summary["trainable"] is True
    assert set(summary["tool_calls_by_name"]) == {"act"}
    # the last request carries the whole conversation: observations came back as tool results
    last = trace["calls"][-1]["request"]["messages"]
    assert [m["role"] for m in last[:2]] == ["system", "user"]
    assert any(m["role"] == "tool" and "Crafter step" in m["content"] for m in last)


def test_rewards_are_the_achievements_unlocked_with_crafters_own_return_recorded(episode):
    out, result = episode
    summary = _read(out, "summary.json")
    crafter = _read(out, "rollout.json")["metadata"]["crafter"]
    assert crafter["achievements_unlocked"] == len(crafter["unlocked"]) >= 1
    assert summary["env_reward"] == pytest.approx(len(crafter["unlocked"]) / len(ACHIEVEMENTS))
    assert crafter["crafter_return"] == pytest.approx(sum(d["reward"] for d in crafter["decisions"]), abs=1e-6)
    assert crafter["env_steps"] == 40 and summary["stop_reason"] == "episode_done"
    # the per-decision unlocks add up to the episode's, and stepwise totals agree (simple, lambda 1)
    assert sorted(u for d in crafter["decisions"] for u in d["newly_unlocked"]) == crafter["unlocked"]
    assert summary["stepwise"]["new_achievements_total"] == len(crafter["unlocked"])
    timeline = _read(out, "achievements.json")["timeline"]
    assert timeline[-1]["achieved"] == crafter["unlocked"]
    assert len(timeline) == summary["agent_turns"]


def test_the_summary_carries_the_episodes_env_metrics(episode):
    out, _ = episode
    summary = _read(out, "summary.json")
    crafter = _read(out, "rollout.json")["metadata"]["crafter"]
    assert summary["env_metrics"] == {"achievements_unlocked": crafter["achievements_unlocked"],
                                      "crafter_return": crafter["crafter_return"], "env_steps": crafter["env_steps"]}


def test_the_api_key_reaches_no_artifact(episode):
    out, _ = episode
    for path in out.iterdir():
        assert "SECRET-0123456789" not in path.read_text(encoding="utf-8"), path.name


SCRIPT = [
    {"name": "act", "arguments": {"actions": ["move_left", "fly"]}},
    {"name": "dance", "arguments": {}},
    {"name": "act", "arguments": {"actions": ["noop", "noop"]}},
    "I am done playing.",
]


@pytest.fixture(scope="module")
def script_backend(builtin_tokenizer):
    with run_backend_in_thread(tokenizer=builtin_tokenizer, policy=make_policy("script", steps=SCRIPT)) as backend:
        yield backend


def test_bad_tool_calls_are_answered_with_an_error_and_take_no_step(script_backend):
    world = CrafterWorld(seed=0, max_steps=20, area=SMALL)
    result = CrafterAgent(script_backend.base_url, "local", max_turns=10).run(world)
    tool_messages = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert "unknown action(s) ['fly']" in tool_messages[0] and "No action was taken" in tool_messages[0]
    assert "unknown tool 'dance'" in tool_messages[1]
    assert tool_messages[2].startswith("Took 2 action(s): noop, noop.")
    assert [d["env_steps"] for d in result.decisions] == [0, 0, 2]
    assert [d["invalid"] for d in result.decisions] == [1, 1, 0]
    assert result.env_steps == 2
    assert result.stop_reason == "final_answer"
    assert result.tool_calls_by_name == {"act": 2, "dance": 1}


def test_the_turn_budget_stops_the_episode(script_backend):
    result = CrafterAgent(script_backend.base_url, "local", max_turns=2).run(CrafterWorld(seed=0, area=SMALL))
    assert result.stop_reason == "turn_budget" and result.model_calls == 2


def test_a_first_call_answered_4xx_fails_at_once_naming_status_and_url(script_backend):
    agent = CrafterAgent(script_backend.base_url, "no-such-model", max_turns=3)
    with pytest.raises(UpstreamStatusError, match=r"HTTP 404 for http://127\.0\.0\.1:\d+/v1/chat/completions"):
        agent.run(CrafterWorld(seed=0, area=SMALL))


def test_the_rollout_document_carries_the_per_decision_stepwise_records(episode):
    out, _ = episode
    stepwise = _read(out, "rollout.json")["metadata"]["stepwise"]
    summary = _read(out, "summary.json")
    assert stepwise["config"]["strategy"] == "simple"
    assert len(stepwise["decisions"]) == summary["agent_turns"]
    for decision in stepwise["decisions"]:
        assert set(decision) == {"turn", "ach_delta", "unique_delta", "all", "unique", "indicator", "reward"}
    assert stepwise["totals"] == summary["stepwise"]


def test_the_capture_command_refuses_an_out_of_range_budget_naming_it(capsys):
    from rollout_dataset.cli import main

    assert main(["capture", "--env", "crafter", "--max-steps", "0"]) == 2
    assert "max_steps: 0 is out of range (an integer >= 1)" in capsys.readouterr().err
