"""`rollout-dataset capture --env NAME`: the coding path stays the default, crafter goes to the env registry."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.cli import main
from rollout_dataset.schema import validate


@pytest.fixture(scope="module")
def crafter_capture(tmp_path_factory):
    out = tmp_path_factory.mktemp("capture-env") / "crafter"
    code = main(["capture", "--env", "crafter", "--seed", "2", "--max-steps", "24", "--area", "24",
                 "--max-turns", "5", "--out-dir", str(out)])
    return code, out


def test_capture_env_crafter_writes_a_valid_crafter_rollout(crafter_capture):
    code, out = crafter_capture
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    validate(summary, "summary")
    assert summary["env"] == "crafter" and summary["task_id"] == "crafter-seed-2"
    config = json.loads((out / "task.json").read_text())["config"]
    assert config["max_steps"] == 24 and config["area"] == [24, 24] and config["max_turns"] == 5


def test_the_crafter_summary_carries_its_env_metrics(crafter_capture):
    _, out = crafter_capture
    summary = json.loads((out / "summary.json").read_text())
    metrics = summary["env_metrics"]
    assert set(metrics) == {"achievements_unlocked", "crafter_return", "env_steps"}
    assert metrics["achievements_unlocked"] == round(summary["env_reward"] * 22)
    assert 0 < metrics["env_steps"] <= 24


def test_a_coding_only_flag_with_crafter_exits_two_naming_the_flag(tmp_path, capsys):
    assert main(["capture", "--env", "crafter", "--harness", "opencode", "--out-dir", str(tmp_path)]) == 2
    assert "--harness only applies to --env coding" in capsys.readouterr().err


def test_a_game_flag_with_the_default_coding_env_exits_two(tmp_path, capsys):
    assert main(["capture", "--max-steps", "10", "--out-dir", str(tmp_path)]) == 2
    assert "--max-steps: only for a game environment" in capsys.readouterr().err


def test_an_unknown_env_exits_two_listing_the_known_ones(tmp_path, capsys):
    assert main(["capture", "--env", "chess", "--out-dir", str(tmp_path)]) == 2
    assert "unknown environment 'chess'; known: coding, crafter" in capsys.readouterr().err


def test_a_crafter_value_out_of_range_exits_two(tmp_path, capsys):
    assert main(["capture", "--env", "crafter", "--max-steps", "0", "--out-dir", str(tmp_path)]) == 2
    assert "max_steps" in capsys.readouterr().err


def test_the_summary_schema_explains_env_reward_for_both_families_and_checks_env_metrics(crafter_capture):
    from rollout_dataset.schema import load_schema, schema_errors

    description = load_schema("summary")["properties"]["env_reward"]["description"]
    assert "held-out tests" in description and "22 achievements" in description
    summary = json.loads((crafter_capture[1] / "summary.json").read_text())
    summary["env_metrics"].update(achievements_unlocked=23, crafter_return="high")
    paths = [path for path, _ in schema_errors(summary, "summary")]
    assert paths == ["$.env_metrics.achievements_unlocked", "$.env_metrics.crafter_return"]


def test_the_crafter_module_entry_point_is_gone_capture_env_crafter_replaces_it():
    import importlib.util

    assert importlib.util.find_spec("rollout_dataset.recipes.crafter.__main__") is None
    assert importlib.util.find_spec("rollout_dataset.recipes.crafter.cli") is None


def test_capture_env_crafter_takes_the_old_commands_temperature_and_max_tokens(tmp_path):
    out = tmp_path / "crafter"
    assert main(["capture", "--env", "crafter", "--seed", "2", "--max-steps", "8", "--area", "24", "--max-turns", "2",
                 "--max-tokens", "300", "--temperature", "0.5", "--out-dir", str(out)]) == 0
    config = json.loads((out / "task.json").read_text())["config"]
    assert config["max_tokens"] == 300 and config["temperature"] == 0.5
