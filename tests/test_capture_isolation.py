"""Held-out isolation: the agent's code cannot read the held-out tests of its own or a sibling rollout."""

from __future__ import annotations

import json
import sys

import pytest

from rollout_dataset.capture import CaptureConfig, capture_hidden_paths, capture_rollout, safe_to_hide
from rollout_dataset.sandbox.isolation import probe_isolation
from rollout_dataset.tasks import load_tasks

needs_mounts = pytest.mark.skipif(not probe_isolation().mount,
                                  reason="no mount namespace on this machine: the sandbox cannot hide paths")

OWN_MARKER = "OWN-HELD-OUT-4711"
CONTROL_MARKER = "CONTROL-FILE-READABLE-0815"


def _tool_results(out_dir) -> list[str]:
    trace = json.loads((out_dir / "trace.json").read_text())
    last = trace["calls"][-1]["request"]["messages"]
    return [m["content"] for m in last if m.get("role") == "tool"]


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """Rollout A (oracle) writes its held-out tests; rollout B, next to it, tries to read them and its own."""
    base = tmp_path_factory.mktemp("isolation")
    root = base / "rollouts"
    first = capture_rollout(CaptureConfig(out_dir=root / "a", task_index=0, timeout_s=120, push=False))
    own = root / "b"
    own.mkdir()
    (own / "held_out_tests.json").write_text(json.dumps({"tests": [{"input": OWN_MARKER, "output": ""}]}))
    control = base / "control.txt"
    control.write_text(CONTROL_MARKER)
    command = (f"cat {root / 'a' / 'held_out_tests.json'}; echo; cat {own / 'held_out_tests.json'}; echo; "
               f"ls -a {root}; cat {control}")
    script = base / "script.json"
    script.write_text(json.dumps({"steps": [{"name": "run", "arguments": {"command": command}},
                                            {"name": "submit", "arguments": {}}]}))
    second = capture_rollout(CaptureConfig(out_dir=own, task_index=0, timeout_s=120, push=False,
                                           policy="script", script=script, max_turns=3))
    return first, second, _tool_results(own)


@needs_mounts
def test_a_later_rollout_cannot_read_the_held_out_tests_of_an_earlier_sibling(probed):
    first, _, results = probed
    held = json.loads((first.out_dir / "held_out_tests.json").read_text())
    assert held["tests"], "the sibling wrote real held-out tests"
    output = results[0]
    assert CONTROL_MARKER in output, "the command ran and could read files outside the hidden roots"
    assert "No such file" in output
    for test in held["tests"]:
        assert json.dumps(test["input"]) not in output


@needs_mounts
def test_a_rollout_cannot_read_a_held_out_file_already_in_its_own_folder(probed):
    _, _, results = probed
    assert CONTROL_MARKER in results[0] and OWN_MARKER not in results[0]


def test_the_capture_still_writes_its_own_held_out_tests_afterwards(probed):
    _, second, _ = probed
    held = json.loads((second.out_dir / "held_out_tests.json").read_text())
    assert held["tests"] and OWN_MARKER not in json.dumps(held)


def test_the_output_folder_and_its_parent_root_are_hidden(tmp_path):
    task = load_tasks("builtin", n_prompts=4, seed=0)[0]
    out = tmp_path / "batch" / "rollouts" / "r1"
    extra = tmp_path / "batch" / "dataset"
    assert capture_hidden_paths(task, out, [extra]) == [out.resolve(), out.parent.resolve(), extra.resolve()]


def test_a_parent_holding_the_python_installation_is_not_hidden():
    assert not safe_to_hide(sys.prefix)
    assert not safe_to_hide("/")
    task = load_tasks("builtin", n_prompts=4, seed=0)[0]
    out = f"{sys.prefix}/trace_artifact"
    assert capture_hidden_paths(task, out) == [capture_hidden_paths(task, out)[0]]


def test_a_file_task_source_is_hidden_too(tmp_path):
    source = tmp_path / "tasks.jsonl"
    source.write_text("{}\n")

    class _Task:
        pass

    task = _Task()
    task.source = f"file:{source}"
    assert source.resolve() in capture_hidden_paths(task, tmp_path / "out")


def test_a_parent_holding_the_current_directory_stays_readable_but_its_sibling_rollouts_are_hidden(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = load_tasks("builtin", n_prompts=4, seed=0)[0]
    earlier, unrelated = tmp_path / "r0", tmp_path / "scripts"
    earlier.mkdir()
    (earlier / "held_out_tests.json").write_text("{}")
    unrelated.mkdir()
    hidden = capture_hidden_paths(task, "r1")
    assert hidden == [(tmp_path / "r1").resolve(), earlier.resolve()]
