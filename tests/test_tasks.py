"""The built-in task set and task selection: the spec of `rollout_dataset.tasks`."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest

from rollout_dataset.errors import TaskIndexError
from rollout_dataset.sandbox import verify_solution
from rollout_dataset.tasks import (
    STATEMENT_LEAK_MIN_CHARS,
    Task,
    TestCase,
    builtin_tasks,
    find_builtin_task_by_instruction,
    find_held_out_text,
    held_out_leaks,
    load_tasks,
    normalise_text,
    parse_examples,
    select_task,
    visible_tests_text,
)

TASKS = builtin_tasks()


def test_builtin_set_has_at_least_thirty_tasks_with_unique_ids():
    ids = [t.task_id for t in TASKS]
    assert len(ids) >= 30
    assert len(set(ids)) == len(ids)


def test_every_builtin_task_has_one_to_three_examples_and_five_held_out_tests_and_a_reference():
    for t in TASKS:
        assert 1 <= len(t.visible_tests) <= 3, t.task_id
        assert len(t.held_out_tests) >= 5, t.task_id
        assert t.reference_solution, t.task_id
        assert t.source == "builtin"


def test_every_instruction_shows_its_examples_in_the_fixed_format():
    for t in TASKS:
        assert "Example 1\nInput:\n" in t.instruction, t.task_id
        shown = [(normalise_text(p.input), normalise_text(p.output)) for p in parse_examples(t.instruction)]
        assert shown == [(normalise_text(v.input), normalise_text(v.output)) for v in t.visible_tests], t.task_id


def test_no_held_out_test_appears_in_its_statement():
    problems = [p for t in TASKS for p in held_out_leaks(t)]
    assert problems == []


def test_leak_rule_ignores_texts_shorter_than_the_minimum_and_glued_tokens():
    task = Task("t", "t", "Print 10 or FizzBuzz\n16 please", (TestCase("x\n", "no\n"),),
                (TestCase("10\n", "FizzBuzz\n1\n"), TestCase("zz\n", "16 please\n")))
    assert STATEMENT_LEAK_MIN_CHARS == 3
    # "10" is too short, "FizzBuzz\n1" is glued to "6"; "16 please" is a real hit
    assert find_held_out_text(task, task.instruction, allow_in_instruction=False) == ["held-out test 1 output"]


def test_every_reference_solution_passes_all_visible_and_held_out_tests():
    def check(task: Task):
        held = verify_solution(task, task.reference_solution, workers=1)
        visible = verify_solution(dataclasses.replace(task, held_out_tests=task.visible_tests),
                                  task.reference_solution, workers=1)
        return task.task_id, held.env_reward, visible.env_reward, held.errors + visible.errors

    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [r for r in pool.map(check, TASKS) if r[1] != 1.0 or r[2] != 1.0]
    assert failures == []


def test_selection_is_deterministic_in_the_seed():
    first = [t.task_id for t in load_tasks(n_prompts=10, seed=7)]
    again = [t.task_id for t in load_tasks(n_prompts=10, seed=7)]
    assert first == again


def test_different_seeds_select_different_orders():
    orders = {tuple(t.task_id for t in load_tasks(n_prompts=10, seed=s)) for s in range(4)}
    assert len(orders) == 4


def test_more_prompts_than_tasks_takes_all_without_repeating():
    picked = load_tasks(n_prompts=1000, seed=3)
    assert sorted(t.task_id for t in picked) == sorted(t.task_id for t in TASKS)


def test_n_prompts_below_one_is_refused():
    with pytest.raises(ValueError, match="n_prompts"):
        load_tasks(n_prompts=0)


def test_select_task_returns_the_indexed_task():
    tasks = load_tasks(n_prompts=5, seed=0)
    assert select_task(tasks, 4) is tasks[4]


@pytest.mark.parametrize("index", [5, -1])
def test_out_of_range_index_names_the_valid_range(index):
    tasks = load_tasks(n_prompts=5, seed=0)
    with pytest.raises(TaskIndexError, match=r"valid range: 0\.\.4"):
        select_task(tasks, index)


def test_out_of_range_index_is_also_an_index_error():
    with pytest.raises(IndexError):
        select_task(load_tasks(n_prompts=3), 3)


def test_a_task_is_recognised_from_a_prompt_that_embeds_its_instruction():
    task = TASKS[7]
    prompt = "You are a coding agent.\n\n<task>\n" + task.instruction.replace("\n", "\n    ") + "</task>\nWrite solution.py."
    assert find_builtin_task_by_instruction(prompt) is task


def test_a_task_is_recognised_from_its_statement_alone():
    task = TASKS[3]
    assert find_builtin_task_by_instruction("Solve this:\n" + task.metadata["statement"]) is task


def test_an_unknown_prompt_matches_no_task():
    assert find_builtin_task_by_instruction("Write a haiku about the sea.") is None
    assert find_builtin_task_by_instruction("") is None


def test_visible_tests_text_lists_the_examples_and_no_held_out_test():
    task = TASKS[0]
    text = visible_tests_text(task)
    assert text.startswith("Example 1\nInput:\n") and text.endswith("\n")
    assert all(v.output.strip() in text for v in task.visible_tests)
    assert find_held_out_text(task, text, allow_in_instruction=False) == []


def test_visible_tests_text_is_empty_without_examples():
    assert visible_tests_text(Task("x", "x", "do it")) == ""
