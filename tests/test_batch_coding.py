"""Coding achievements: the visible examples, and a timeline rebuilt from a recorded trace in a real sandbox."""

from __future__ import annotations

import json

from rollout_dataset.batch import StepRewardConfig, read_achievements, stepwise_for_rollout
from rollout_dataset.recipes.coding.replay import CodingExamples
from rollout_dataset.recipes.coding.replay import decisions_from_trace, replay_timeline, timeline_for_artifacts
from rollout_dataset.tasks.model import Task, TestCase, compose_instruction

EXAMPLES = (TestCase("2 3\n", "5\n"), TestCase("-1 1\n", "0\n"))
TASK = Task("add-two", "Add two", compose_instruction("Print the sum of two integers.", EXAMPLES), visible_tests=EXAMPLES)

WRONG = "a, b = map(int, input().split())\nprint(a * b if a > 0 else a + b)\n"  # passes example 2 only
RIGHT = "a, b = map(int, input().split())\nprint(a + b)\n"
BROKEN = "print(\n"


def call(index: int, *tools: tuple[str, dict]) -> dict:
    """A trace record of one chat completion whose assistant message calls `tools`."""
    tool_calls = [
        {"id": f"c{index}{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(tools)
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls or None}
    return {"index": index, "endpoint": "/v1/chat/completions", "response": {"choices": [{"message": message}]}}


TRACE = [
    call(0, ("write_file", {"path": "solution.py", "content": WRONG})),
    call(1, ("run_examples", {})),
    call(2, ("write_file", {"path": "solution.py", "content": BROKEN})),
    call(3, ("run", {"command": f"printf '%s' '{RIGHT}' > solution.py"})),  # a shell edit, re-run in the sandbox
    call(4, ("submit", {})),
    {"index": 5, "endpoint": "/v1/models", "response": {"data": []}},
]


def test_examples_are_named_from_one_like_the_statement():
    assert CodingExamples(TASK).catalogue() == ["example_1", "example_2"]


def test_decisions_from_trace_number_turns_by_assistant_message():
    decisions = decisions_from_trace(TRACE)
    assert [turn for turn, _ in decisions] == [0, 1, 2, 3, 4]
    assert decisions[3][1][0][0] == "run"


def test_replayed_timeline_follows_the_solution_through_a_break_and_a_shell_fix():
    timeline = replay_timeline(TRACE, CodingExamples(TASK))
    assert [(s.turn, sorted(s.achieved)) for s in timeline] == [
        (0, ["example_2"]),
        (1, ["example_2"]),
        (2, []),
        (3, ["example_1", "example_2"]),
    ]  # submit changes nothing, so it is not a decision
    decisions, totals = stepwise_for_rollout(timeline, StepRewardConfig(strategy="complex", k_limits={"example_2": 2}))
    assert [d["reward"] for d in decisions] == [1.0, 0.0, 0.0, 2.0]
    assert totals["new_achievements_total"] == 2


def test_timeline_for_artifacts_replays_once_and_records_achievements_json(tmp_path):
    (tmp_path / "trace.json").write_text(json.dumps({"schema_version": 1, "session": "s", "calls": TRACE}))
    (tmp_path / "task.json").write_text(json.dumps({"task_id": TASK.task_id, "title": TASK.title,
                                                     "instruction": TASK.instruction, "source": "builtin"}))
    timeline, initial = timeline_for_artifacts(tmp_path)
    assert len(timeline) == 4 and initial == frozenset()
    recorded = json.loads((tmp_path / "achievements.json").read_text())
    assert recorded["source"] == "replayed" and recorded["catalogue"] == ["example_1", "example_2"]
    (tmp_path / "trace.json").unlink()  # the second read uses the recorded file, no replay
    assert read_achievements(tmp_path)[0] == timeline
    assert timeline_for_artifacts(tmp_path)[0] == timeline
