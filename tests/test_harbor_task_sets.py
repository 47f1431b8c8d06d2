"""Harbor task sets as public sets are written: a folder that does not load, multi-step tasks
(``[[steps]]``), the legacy ``allow_internet``, Dockerfile ``WORKDIR``/``ENV`` in the bwrap environment,
and how ``--task-index`` maps to a task. The sample set is `tests/data/harbor-set/` (its README).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.errors import ConfigError, TaskSourceError
from rollout_dataset.harbor.adapter import find_harbor
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.schema.check import check_artifact_dir
from rollout_dataset.tasks import load_tasks
from rollout_dataset.tasks.harbor_format import load_harbor_set

SET = Path(__file__).resolve().parent / "data" / "harbor-set"
LOADED = ["offline", "two-steps"]  # no-instruction does not load


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "set"
    shutil.copytree(SET, dest)
    return dest


def test_a_folder_that_does_not_load_is_skipped_and_named_once(tmp_path, caplog):
    folder = _copy(tmp_path)
    with caplog.at_level(logging.WARNING, logger="rollout_dataset.tasks.harbor_format"):
        tasks = load_tasks(str(folder), n_prompts=10)
        load_tasks(str(folder), n_prompts=10)  # every rollout of a batch loads the set: still one warning
    assert sorted(t.task_id for t in tasks) == LOADED
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [f"skipped: {folder / 'no-instruction'}: not a Harbor task: instruction.md is missing"]


def test_every_index_of_a_set_with_a_broken_folder_still_selects_a_task(tmp_path):
    from rollout_dataset.tasks import select_task

    folder = _copy(tmp_path)
    tasks = load_tasks(str(folder), n_prompts=64, seed=0)
    assert sorted(select_task(tasks, index).task_id for index in range(len(LOADED))) == LOADED


def test_a_set_none_of_whose_folders_load_is_refused_naming_the_first(tmp_path):
    folder = tmp_path / "set"
    shutil.copytree(SET / "no-instruction", folder / "no-instruction")
    with pytest.raises(TaskSourceError, match=r"none of its 1 Harbor task folders loads .*instruction.md is missing"):
        load_tasks(str(folder))


def test_task_index_follows_the_seeded_shuffle_of_the_folders_sorted_by_name(tmp_path):
    folder = tmp_path / "set"
    for n in range(7):
        shutil.copytree(SET / "offline", folder / f"task-{n}")
    names = [f"task-{n}" for n in range(7)]  # sorted by name, the broken ones left out
    for seed in (0, 3):
        order = list(range(len(names)))
        random.Random(seed).shuffle(order)
        assert [t.task_id for t in load_tasks(str(folder), n_prompts=64, seed=seed)] == [names[i] for i in order]


def test_a_multi_step_task_loads_with_its_steps_and_no_datasets_fallback(tmp_path):
    tasks, skipped = load_harbor_set(SET)
    task = next(t for t in tasks if t.task_id == "two-steps")
    assert task.metadata["harbor"]["steps"] == ["first", "second"]
    assert task.instruction.startswith("## Step first\n\nWrite the word one") and "## Step second" in task.instruction
    assert any("PROBE_VAR" in text for text in task.metadata["held_out_text"])  # each step's tests/ are held out
    assert len(skipped) == 1
    # one task folder on its own, not a set: loaded as the multi-step task it is
    assert [t.task_id for t in load_tasks(str(SET / "two-steps"))] == ["two-steps"]


def test_a_multi_step_task_missing_a_steps_instruction_is_named(tmp_path):
    folder = _copy(tmp_path) / "two-steps"
    (folder / "steps" / "second" / "instruction.md").unlink()
    with pytest.raises(TaskSourceError, match=r"step 'second' has no steps/second/instruction.md"):
        load_tasks(str(folder))


def test_a_steps_folder_without_its_steps_table_is_named_as_such(tmp_path):
    folder = _copy(tmp_path) / "two-steps"
    (folder / "task.toml").write_text("[agent]\ntimeout_sec = 60.0\n")
    with pytest.raises(TaskSourceError, match=r"a steps/ folder but task.toml lists no \[\[steps\]\]"):
        load_tasks(str(folder))


def test_a_multi_step_task_is_refused_for_a_harness_other_than_terminus_2(tmp_path):
    tasks = load_tasks(str(SET))
    index = [t.task_id for t in tasks].index("two-steps")
    with pytest.raises(ConfigError, match=r"multi-step Harbor task \(\[\[steps\]\].*2 steps.*only --harness terminus-2"):
        capture_rollout(CaptureConfig(out_dir=tmp_path / "out", tasks=str(SET), task_index=index, harness="builtin"))


def test_allow_internet_false_is_read_as_no_network_and_network_mode_wins(tmp_path):
    tasks = {t.task_id: t for t in load_tasks(str(SET))}
    assert tasks["offline"].metadata["harbor"]["network_mode"] == "no-network"
    folder = _copy(tmp_path) / "offline"
    (folder / "task.toml").write_text('[environment]\nallow_internet = false\nnetwork_mode = "public"\n')
    assert load_tasks(str(folder))[0].metadata["harbor"]["network_mode"] == "public"
    (folder / "task.toml").write_text("[environment]\n")
    assert load_tasks(str(folder))[0].metadata["harbor"]["network_mode"] == "public"


def test_a_batch_names_the_skipped_folder_in_its_notes_and_report(tmp_path):
    from rollout_dataset.batch.config import BatchConfig
    from rollout_dataset.batch.report import render_report
    from rollout_dataset.recipes.coding.env import CodingEnvironment

    folder = _copy(tmp_path)
    config = BatchConfig(out_dir=tmp_path / "b", seeds=[0], tasks=str(folder), unsafe_sandbox=True)
    CodingEnvironment().batch_options(config)
    line = f"skipped: {folder / 'no-instruction'}: not a Harbor task: instruction.md is missing"
    assert config.notes == [line] and config.snapshot()["notes"] == [line]
    summary = {"created_at": "t", "model": None, "counts": {"seeds": 1, "rollouts_per_seed": 1, "rollouts_finished": 0,
               "rollouts_planned": 1, "rollouts_scored": 0, "zero_turn_rollouts": 0}, "turns": {"mean": None},
               "strategies": {}}
    text = render_report(summary=summary, stats_by_seed={}, snapshot={"config": config.snapshot()}, plots={},
                         out_dir=tmp_path / "b")
    notes = text.split("## Notes\n\n", 1)[1].split("\n\n", 1)[0]
    assert notes.startswith("- skipped: ") and "no-instruction" in notes and "instruction.md is missing" in notes


@pytest.mark.usefixtures("harbor_environment")
@pytest.mark.skipif(find_harbor() is None or shutil.which("bwrap") is None, reason="needs Harbor and bwrap")
def test_terminus_2_runs_a_multi_step_task_as_one_rollout_with_each_steps_reward(tmp_path):
    tasks = load_tasks(str(SET))
    index = [t.task_id for t in tasks].index("two-steps")
    out = tmp_path / "out"
    result = capture_rollout(CaptureConfig(out_dir=out, harness="terminus-2", tasks=str(SET), task_index=index,
                                           rollout_seed=1))
    assert result.ok, result.errors
    summary = result.summary
    harbor = summary["harbor"]
    assert summary["capture_level"] == "tokens"
    # step "first" scores 1 only where the Dockerfile's WORKDIR and ENV reached the verifier's shell
    assert [(s["name"], s["reward"]) for s in harbor["steps"]] == [("first", 1.0), ("second", 0.5)]
    assert summary["env_reward"] == 0.75  # Harbor's mean over the steps
    assert harbor["environment"] == "bwrap" and harbor["network"] == {"asked": "no-network", "given": "none"}
    assert "python:3.12-slim" in harbor["environment_notes"][0]
    check = harbor["trajectory"]
    assert check["findings"] == [] and check["matched"] == summary["captured_calls"]
    for step in ("first", "second"):
        trajectory = json.loads((out / f"harbor_trajectory.step-{step}.json").read_text())
        assert trajectory["schema_version"].startswith("ATIF")
    assert check_artifact_dir(out) == []
