"""Policies: echo, script (JSON/YAML), and the registry other modules plug into."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rollout_dataset.backend import (
    EchoPolicy,
    PolicyOutput,
    PolicyRequest,
    ScriptPolicy,
    ToolCallSpec,
    available_policies,
    make_policy,
    register_policy,
    unregister_policy,
)


def _req(messages, **kw):
    turn = sum(1 for m in messages if m["role"] == "assistant")
    return PolicyRequest(messages=messages, turn=turn, **kw)


def test_echo_repeats_the_last_user_message():
    msgs = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "x"},
            {"role": "user", "content": [{"type": "text", "text": "sec"}, {"type": "text", "text": "ond"}]}]
    assert EchoPolicy().respond(_req(msgs)).text == "second"


def test_script_steps_are_indexed_by_assistant_turn_then_final_text(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "steps:\n"
        "  - text: Looking.\n"
        "    tool_calls:\n"
        "      - {name: bash, arguments: {command: ls -la}}\n"
        "  - {name: bash, arguments: {command: cat a.py}}\n"
        "  - All good.\n"
        "final: Bye.\n"
    )
    policy = make_policy("script", script=str(path))
    user = [{"role": "user", "content": "go"}]
    a = {"role": "assistant", "content": "x"}
    out0 = policy.respond(_req(user))
    assert out0.text == "Looking." and out0.tool_calls == [ToolCallSpec("bash", {"command": "ls -la"})]
    assert policy.respond(_req(user + [a])).tool_calls[0].arguments == {"command": "cat a.py"}
    assert policy.respond(_req(user + [a, a])).text == "All good."
    assert policy.respond(_req(user + [a, a, a])).text == "Bye."


def test_script_reads_a_json_list(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"tool_calls": [{"name": "bash", "arguments": '{"command": "pwd"}'}]}]))
    policy = ScriptPolicy(str(path))
    assert policy.respond(_req([])).tool_calls[0].arguments == '{"command": "pwd"}'
    assert policy.respond(_req([{"role": "assistant", "content": ""}])).text == "Done."


@pytest.mark.parametrize(
    "steps, message",
    [
        ([{"tool_calls": [{"arguments": {}}]}], r"steps\[0\]\.tool_calls\[0\]: a tool call needs"),
        ([{"text": "x", "bogus": 1}], r"steps\[0\]: unknown keys \['bogus'\]"),
        ([{"name": "bash", "arguments": "{oops"}], r"steps\[0\]: 'arguments' is a string but not valid JSON"),
        ([7], r"steps\[0\]: a step is a string or an object"),
    ],
)
def test_malformed_script_steps_are_named_in_the_error(steps, message):
    with pytest.raises(ValueError, match=message):
        ScriptPolicy(steps=steps)


def test_script_file_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        ScriptPolicy(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.json"
    bad.write_text("[1,")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        ScriptPolicy(str(bad))


def test_registered_policies_are_made_by_name():
    class Fixed:
        def respond(self, request):
            return PolicyOutput(text=f"turn {request.turn}")

    register_policy("fixed-for-test", lambda **kw: Fixed())
    try:
        assert "fixed-for-test" in available_policies()
        assert make_policy("fixed-for-test").respond(_req([])).text == "turn 0"
    finally:
        unregister_policy("fixed-for-test")
    assert "fixed-for-test" not in available_policies()  # the next test sees the registry as it was


def test_the_backend_registers_no_environment_policy_the_edges_register_them():
    code = ("from rollout_dataset.backend import available_policies as a\n"
            "before = a()\n"
            "from rollout_dataset.envs.registry import register_builtin_policies\n"
            "register_builtin_policies()\n"
            "print(before, a())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[0] == "['echo', 'script'] ['crafter', 'echo', 'oracle', 'script']"


def test_unknown_policy_names_the_available_ones():
    with pytest.raises(ValueError, match="unknown policy 'nope'.*echo.*script"):
        make_policy("nope")
