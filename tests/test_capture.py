"""One rollout end to end with the oracle: local backend, proxy, built-in harness, verifier, artifacts."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.backend.oracle import oracle_plan
from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.artifact_files import DERIVED_ARTIFACT_FILES
from rollout_dataset.schema.check import ARTIFACT_FILES, validate_path
from rollout_dataset.tasks import load_tasks

SEED = 0


def _seed_for(task_id: str, *, wrong: bool) -> int:
    """A rollout seed whose oracle plan is right first time (wrong=False) or wrong and unfixed."""
    for s in range(200):
        plan = oracle_plan(task_id, s)
        if (not wrong and not plan.wrong_first) or (wrong and plan.wrong_first and not plan.fix):
            return s
    raise AssertionError("no such seed")


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    """Four oracle captures: tasks 0, 1, 2 (the last with a wrong, unfixed attempt) and task 0 again."""
    tasks = load_tasks("builtin", n_prompts=64, seed=SEED)
    plan = [(0, _seed_for(tasks[0].task_id, wrong=False)), (1, _seed_for(tasks[1].task_id, wrong=False)),
            (2, _seed_for(tasks[2].task_id, wrong=True)), (0, _seed_for(tasks[0].task_id, wrong=True))]
    results = []
    for n, (index, rollout_seed) in enumerate(plan):
        out = tmp_path_factory.mktemp(f"capture{n}")
        results.append(capture_rollout(CaptureConfig(out_dir=out, task_index=index, seed=SEED,
                                                     rollout_seed=rollout_seed, timeout_s=120)))
    return results


def test_oracle_captures_on_three_tasks_see_rewards_of_one_and_below_one(captures):
    rewards = [r.summary["env_reward"] for r in captures[:3]]
    assert len({r.summary["task_id"] for r in captures[:3]}) == 3
    assert rewards[0] == 1.0 and rewards[1] == 1.0 and rewards[2] < 1.0


def test_every_capture_writes_every_artifact_and_they_validate(captures):
    for result in captures:
        assert result.ok, (result.errors, result.validation_failures)
        assert sorted(p.name for p in result.out_dir.iterdir()) == sorted(ARTIFACT_FILES + DERIVED_ARTIFACT_FILES)
        assert validate_path(result.out_dir) == []


def test_the_summary_reports_the_rollout_as_the_builtin_harness_ran_it(captures):
    summary = captures[0].summary
    assert summary["harness"] == "builtin" and summary["model"] == "local" and summary["stop_reason"] == "submit"
    assert summary["tool_calls_by_name"] == {"run_examples": 1, "submit": 1, "write_file": 1}
    assert summary["captured_calls"] == summary["agent_turns"] == 3
    assert summary["capture_level"] == "tokens" and summary["trainable"] and summary["trainable_tokens"] > 0
    assert summary["held_out_passed"] == summary["held_out_tests"] >= 5
    assert summary["penalties"] == [] and summary["reward_after_penalties"] == 1.0
    assert summary["timed_out"] is False and summary["leakage"] == {"checked": True, "hits": []}


def test_turn_ids_are_the_servers_own_with_a_derived_mask(captures):
    out = captures[0].out_dir
    trace = json.loads((out / "trace.json").read_text())
    turns = json.loads((out / "turns.json").read_text())
    assert turns["mask_is_derived"] is True
    for call, turn in zip(trace["calls"], turns["turns"]):
        assert turn["prompt_ids"] == call["prompt_token_ids"] and turn["output_ids"] == call["completion_token_ids"]
        assert turn["mask"] == [0] * len(turn["prompt_ids"]) + [1] * len(turn["output_ids"])
        assert len(turn["per_token_logps"]) == len(turn["output_ids"])
        assert {t["function"]["name"] for t in call["request"]["tools"]} >= {"write_file", "run_examples", "submit"}


def test_task_files_hold_the_statement_and_the_held_out_tests_the_agent_never_saw(captures):
    out = captures[2].out_dir
    task = json.loads((out / "task.json").read_text())
    held = json.loads((out / "held_out_tests.json").read_text())
    visible = (out / "visible_tests.txt").read_text()
    assert task["task_index"] == 2 and task["dataset_seed"] == SEED and task["source"] == "builtin"
    assert held["task_id"] == task["task_id"] and len(held["tests"]) == captures[2].summary["held_out_tests"]
    assert visible.strip() and visible.strip().splitlines()[0] in task["instruction"]


def test_a_rollout_seed_resamples_the_same_task(captures):
    first, again = captures[0].summary, captures[3].summary
    assert first["task_id"] == again["task_id"] and first["rollout_seed"] != again["rollout_seed"]
    assert again["env_reward"] < 1.0 and first["rollout_id"] != again["rollout_id"]


def test_the_wrong_attempt_is_penalty_free_but_scored_by_the_real_verifier(captures):
    summary = captures[2].summary
    assert 0 <= summary["held_out_passed"] < summary["held_out_tests"]
    assert summary["env_reward"] == pytest.approx(summary["held_out_passed"] / summary["held_out_tests"])
    assert summary["reward_after_penalties"] == pytest.approx(summary["env_reward"])


def _capture_a_doubling_task(tmp_path, task_id: str, instruction: str):
    """Capture one rollout of a task from a local JSONL file: double the integer given (solved by a command)."""
    tasks = tmp_path / "tasks.jsonl"
    row = {"task_id": task_id, "title": "Double it", "instruction": instruction,
           "held_out_tests": [{"input": f"{n}\n", "output": f"{2 * n}\n"} for n in (0, -7, 123456, 99, 5)]}
    tasks.write_text(json.dumps(row) + "\n")
    harness = "cmd:printf 'print(2 * int(input()))\\n' > solution.py"
    return capture_rollout(CaptureConfig(out_dir=tmp_path / "out", tasks=str(tasks), harness=harness, timeout_s=60))


def test_a_task_from_a_local_jsonl_file_is_captured_with_an_external_harness(tmp_path):
    result = _capture_a_doubling_task(
        tmp_path, "double-it", "Print twice the integer given on one line.\n\nExample 1\nInput:\n4\nOutput:\n8\n")
    assert result.ok, (result.errors, result.validation_failures)
    summary = result.summary
    assert summary["task_id"] == "double-it" and summary["env_reward"] == 1.0 and summary["captured_calls"] == 0
    assert [p["code"] for p in summary["penalties"]] == ["never_ran_code"]
    assert json.loads((tmp_path / "out" / "task.json").read_text())["source"].startswith("file:")


def test_a_capture_on_a_task_whose_statement_shows_a_held_out_test_warns_of_it(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="rollout_dataset.tasks.loader"):
        result = _capture_a_doubling_task(
            tmp_path, "double-shown",
            "Print twice the integer given.\n\nExample 1\nInput:\n4\nOutput:\n8\n\n123456 gives 246912.\n")
    assert result.ok, (result.errors, result.validation_failures)
    warned = [r.getMessage() for r in caplog.records if r.name == "rollout_dataset.tasks.loader"]
    assert warned and all(w.startswith("task double-shown: held-out test 2 ") for w in warned)
