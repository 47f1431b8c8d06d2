"""The oracle policy: recognises built-in tasks, drives the built-in tools, sometimes fails first.

These tests play the conversation in-process (policy -> real tools in a real sandbox -> real
verifier); the capture tests run the same policy behind the HTTP backend and the proxy.
"""

from __future__ import annotations

import json

from rollout_dataset.backend.oracle import OraclePolicy, oracle_plan
from rollout_dataset.backend.policies import PolicyRequest, make_policy
from rollout_dataset.recipes.coding.policy import make_oracle
from rollout_dataset.recipes.coding import harness_statement
from rollout_dataset.harness import ToolBox, tool_manifest
from rollout_dataset.harness.tools import sandbox_runner
from rollout_dataset.sandbox import Sandbox, verify_solution
from rollout_dataset.tasks import builtin_tasks


def _play(task, seed, tools=None, max_turns=10):
    """Run the oracle with the built-in tools until it submits; return (tool names, reward)."""
    policy = make_oracle()
    tools = tools or tool_manifest()
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": harness_statement(task.instruction)}]
    names = []
    with Sandbox() as box:
        toolbox = ToolBox(box.workdir, [(t.input, t.output) for t in task.visible_tests], sandbox_runner(box))
        for turn in range(max_turns):
            out = policy.respond(PolicyRequest(messages=messages, tools=tools, seed=seed, turn=turn))
            if not out.tool_calls:
                break
            calls = [{"id": f"c{turn}-{i}", "type": "function",
                      "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                     for i, c in enumerate(out.tool_calls)]
            messages.append({"role": "assistant", "content": out.text, "tool_calls": calls})
            done = False
            for call in calls:
                names.append(call["function"]["name"])
                outcome = toolbox.execute(call["function"]["name"], call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": outcome.content})
                done = done or outcome.submitted
            if done:
                break
        return names, verify_solution(task, box.workdir).env_reward


def test_the_coding_environment_registers_the_oracle_with_the_backend_policies():
    assert isinstance(make_policy("oracle"), OraclePolicy)


def test_an_oracle_without_a_task_lookup_recognises_no_task():
    task = builtin_tasks()[0]
    messages = [{"role": "user", "content": harness_statement(task.instruction)}]
    assert make_oracle().respond(PolicyRequest(messages=messages, tools=tool_manifest(), seed=0)).tool_calls
    out = OraclePolicy().respond(PolicyRequest(messages=messages, tools=tool_manifest(), seed=0))
    assert out.text.startswith("I do not recognise this task") and not out.tool_calls


def test_a_correct_first_attempt_writes_runs_examples_and_submits():
    task = builtin_tasks()[0]
    seed = next(s for s in range(50) if not oracle_plan(task.task_id, s).wrong_first)
    names, reward = _play(task, seed)
    assert names == ["write_file", "run_examples", "submit"] and reward == 1.0


def test_the_plan_is_seeded_and_both_outcomes_occur():
    task = builtin_tasks()[1]
    plans = [oracle_plan(task.task_id, s) for s in range(20)]
    assert plans == [oracle_plan(task.task_id, s) for s in range(20)]
    assert {p.wrong_first for p in plans} == {True, False}


def test_a_wrong_unfixed_attempt_scores_below_one_on_the_real_verifier():
    task = builtin_tasks()[1]
    seed = next(s for s in range(60) if oracle_plan(task.task_id, s).wrong_first and not oracle_plan(task.task_id, s).fix)
    names, reward = _play(task, seed)
    assert names == ["write_file", "run_examples", "submit"] and reward is not None and reward < 1.0


def test_a_fixed_attempt_rewrites_after_seeing_failing_examples():
    for task in builtin_tasks()[:6]:
        for seed in range(30):
            plan = oracle_plan(task.task_id, seed)
            if plan.wrong_first and plan.fix:
                names, reward = _play(task, seed)
                if names.count("write_file") == 2:
                    assert names == ["write_file", "run_examples", "write_file", "run_examples", "submit"]
                    assert reward == 1.0
                    return
    raise AssertionError("no seed produced a wrong-then-fixed rollout")


def test_an_unknown_task_gets_a_plain_refusal():
    out = make_oracle().respond(PolicyRequest(messages=[{"role": "user", "content": "Write a poem."}],
                                               tools=tool_manifest(), seed=0))
    assert not out.tool_calls and "do not recognise" in out.text


def test_with_only_a_bash_tool_it_writes_the_file_by_shell_and_ends_like_mini_swe_agent():
    task = builtin_tasks()[0]
    seed = next(s for s in range(50) if not oracle_plan(task.task_id, s).wrong_first)
    bash = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": task.instruction}]
    commands = []
    for turn in range(4):
        out = make_oracle().respond(PolicyRequest(messages=messages, tools=bash, seed=seed, turn=turn))
        command = out.tool_calls[0].arguments["command"]
        commands.append(command)
        messages += [{"role": "assistant", "content": out.text, "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]},
            {"role": "tool", "tool_call_id": "x", "content": "example 1: PASS"}]
        if "COMPLETE_TASK" in command:
            break
    assert commands[0].startswith("cat > solution.py <<")
    assert "python3 solution.py" in commands[1]
    assert commands[-1] == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
