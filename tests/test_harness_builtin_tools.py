"""The built-in harness's tools, run in a real sandbox."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.harness import TOOL_NAMES, ToolBox, tool_manifest
from rollout_dataset.harness.tools import sandbox_runner
from rollout_dataset.sandbox import Sandbox

EXAMPLES = [("1 2\n", "3\n"), ("10 -4\n", "6\n")]


@pytest.fixture
def box():
    with Sandbox() as sandbox:
        yield ToolBox(sandbox.workdir, EXAMPLES, sandbox_runner(sandbox))


def test_manifest_declares_every_tool_with_an_object_schema():
    manifest = tool_manifest()
    assert [t["function"]["name"] for t in manifest] == list(TOOL_NAMES)
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in manifest)


def test_write_then_read_round_trips_and_flags_the_solution_file(box):
    out = box.execute("write_file", json.dumps({"path": "solution.py", "content": "print(1)\n"}))
    assert out.ok and out.changed_solution
    assert box.execute("read_file", {"path": "solution.py"}).content == "print(1)\n"


def test_paths_outside_the_workdir_are_refused(box):
    out = box.execute("write_file", {"path": "../escape.txt", "content": "x"})
    assert not out.ok and "outside the working directory" in out.content
    assert not (box.workdir.parent / "escape.txt").exists()


def test_run_examples_reports_each_example_and_counts_as_running_code(box):
    box.execute("write_file", {"path": "solution.py", "content": "a, b = map(int, input().split())\nprint(a + b)\n"})
    out = box.execute("run_examples", "{}")
    assert out.ok and out.ran_code and out.examples_passed == [0, 1]
    box.execute("write_file", {"path": "solution.py", "content": "print(3)\n"})
    out = box.execute("run_examples", "")
    assert not out.ok and out.examples_passed == [0] and "example 2: FAIL" in out.content


def test_run_executes_a_shell_command_with_stdin_in_the_workdir(box):
    out = box.execute("run", {"command": "cat; pwd", "stdin": "hello\n"})
    assert out.ran_code and "exit code: 0" in out.content
    assert "hello" in out.content and str(box.workdir) in out.content


def test_a_command_over_the_time_limit_is_a_recorded_limit(box):
    out = box.execute("run", {"command": "sleep 5"}, timeout_s=0.5)
    assert not out.ok and "limit hit: wall" in out.content


def test_malformed_arguments_and_unknown_tools_are_errors_for_the_model(box):
    assert "could not parse" in box.execute("write_file", "{not json").content
    out = box.execute("delete_everything", "{}")
    assert not out.ok and "unknown tool" in out.content


def test_submit_ends_the_rollout(box):
    assert box.execute("submit", None).submitted
