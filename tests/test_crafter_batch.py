"""`rollout-dataset batch --env crafter --smoke`: the coding batch's outputs, from game rollouts."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.cli import main
from rollout_dataset.envs import available_environments, get_environment
from rollout_dataset.recipes.crafter.batch import episode_options, rollout_seed_for
from rollout_dataset.errors import ConfigError
from rollout_dataset.schema import validate


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("crafter-batch") / "batch"
    code = main(["batch", "--env", "crafter", "--smoke", "--max-turns", "4", "--concurrency", "2",
                 "--env-option", "area=[24,24]", "--env-option", "max_steps=24", "--no-progress", "--out", str(out)])
    return code, out


def test_the_smoke_batch_succeeds_and_writes_every_output(smoke):
    code, out = smoke
    assert code == 0
    for name in ("report.md", "summary/summary.json", "summary/stats_by_seed.json", "summary/config_snapshot.json",
                 "runs/simple.jsonl", "runs/complex.jsonl", "dataset/README.md"):
        assert (out / name).is_file(), name
    plots = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert len(plots) == 6
    assert all((out / "plots" / p).read_bytes().startswith(b"\x89PNG") for p in plots)


def test_each_strategy_has_one_valid_run_record_per_rollout_with_achievements_as_final_return(smoke):
    _, out = smoke
    for strategy in ("simple", "complex"):
        records = [json.loads(line) for line in (out / "runs" / f"{strategy}.jsonl").read_text().splitlines()]
        assert sorted(r["seed"] for r in records) == [0, 1]
        for record in records:
            validate(record, "run_record")
            assert record["num_steps"] > 0 and record["task_id"] == f"crafter-seed-{record['seed']}"
            assert record["final_return"] == record["new_achievements_total"] >= 1
    result_docs = [json.loads(p.read_text()) for p in (out / "rollouts").glob("*/batch_result.json")]
    assert len(result_docs) == 2
    for doc in result_docs:
        assert doc["extra"]["env"] == "crafter" and doc["extra"]["crafter_return"] is not None
        assert doc["timeline"], "the achievement timeline reached the batch"


def test_env_options_reach_every_episode_and_the_config_snapshot(smoke):
    _, out = smoke
    snapshot = json.loads((out / "summary" / "config_snapshot.json").read_text())
    assert snapshot["config"]["env_options"] == {"area": [24, 24], "max_steps": 24}
    tasks = [json.loads(p.read_text()) for p in (out / "rollouts").glob("*/task.json")]
    assert len(tasks) == 2
    assert all(t["config"]["area"] == [24, 24] and t["config"]["max_steps"] == 24 for t in tasks)


def test_the_report_compares_stepwise_and_final_returns_for_both_strategies(smoke):
    _, out = smoke
    report = (out / "report.md").read_text()
    assert "crafter" in report and "| simple |" in report and "| complex |" in report
    assert "number of Crafter achievements unlocked in the episode (0–22)" in report
    assert "extra.crafter_return" in report and "held-out tests" not in report
    summary = json.loads((out / "summary" / "summary.json").read_text())
    assert set(summary["strategies"]) == {"simple", "complex"}


def test_crafter_is_an_environment_of_the_one_registry():
    assert {"coding", "crafter"} <= set(available_environments())
    environment = get_environment("crafter")
    assert environment.name == "crafter" and environment.default_policy == "crafter"
    assert environment.config_class().__name__ == "CrafterRolloutConfig"
    with pytest.raises(ConfigError, match="unknown environment 'chess'; known: coding, crafter"):
        get_environment("chess")


class _Config:
    max_turns = 5
    env_options: dict = {}


def test_the_episode_budget_defaults_to_eight_actions_per_turn_and_rejects_unknown_options():
    assert episode_options(_Config()) == {"max_actions": 8, "max_steps": 40}
    config = _Config()
    config.env_options = {"max_steps": 12, "area": 32}
    assert episode_options(config) == {"max_actions": 8, "max_steps": 12, "area": (32, 32)}
    config.env_options = {"gravity": 1}
    with pytest.raises(ConfigError, match="gravity.*valid: area, max_actions, max_steps, view"):
        episode_options(config)


def test_the_env_option_flag_parses_json_values_and_keeps_other_text():
    from rollout_dataset.batch.config import parse_env_option

    assert parse_env_option("max_steps=20") == ("max_steps", 20)
    assert parse_env_option("area=[16,16]") == ("area", [16, 16])
    assert parse_env_option("mode=fast") == ("mode", "fast")
    with pytest.raises(ConfigError, match="not KEY=VALUE"):
        parse_env_option("max_steps")


def test_an_unknown_crafter_option_exits_two_before_any_rollout(tmp_path, capsys):
    out = tmp_path / "batch"
    assert main(["batch", "--env", "crafter", "--smoke", "--env-option", "gravity=1", "--no-progress",
                 "--out", str(out)]) == 2
    assert "gravity" in capsys.readouterr().err
    assert not (out / "rollouts").exists()


def test_the_coding_env_rejects_an_env_option_it_does_not_take(tmp_path, capsys):
    assert main(["batch", "--smoke", "--env-option", "max_steps=3", "--no-progress", "--out", str(tmp_path / "b")]) == 2
    assert "the coding environment takes only harness=NAME and harbor_env=ENV (got max_steps)" in capsys.readouterr().err


def test_rollouts_of_one_world_use_distinct_request_seeds():
    assert {rollout_seed_for(3, i) for i in range(3)} == {3000, 3001, 3002}
