"""Running an external harness command: placeholders, environment, isolation of HOME, stopping."""

from __future__ import annotations

import json
import os

import pytest

from rollout_dataset.harness import resolve_harness, run_external_harness, substitute_placeholders


def test_placeholders_are_shell_quoted_and_other_braces_kept():
    cmd = substitute_placeholders("echo {base_url} {x} '{\"a\": 1}'", {"base_url": "http://h/v1 && rm -rf /"})
    assert cmd == "echo 'http://h/v1 && rm -rf /' {x} '{\"a\": 1}'"


def test_the_harness_sees_the_proxy_url_key_task_and_an_isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_should_not_be_inherited_123456")
    command = ("python3 -c 'import json, os; json.dump({k: os.environ.get(k) for k in "
               "[\"OPENAI_BASE_URL\", \"OPENAI_API_BASE\", \"OPENAI_API_KEY\", \"HOME\", \"XDG_CONFIG_HOME\", "
               "\"HF_TOKEN\", \"EXTRA\"]}, open(\"env.json\", \"w\"))'; cp {task_file} task_copy.md; pwd > where.txt")
    result = run_external_harness(command, base_url="http://127.0.0.1:9/v1", model="m", workdir=tmp_path,
                                  instruction="Solve it.", api_key="sk-test-key", timeout_s=30,
                                  env={"EXTRA": "{model}@{base_url}"})
    assert result.exit_code == 0 and result.stop_reason == "harness_exit" and not result.timed_out
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["OPENAI_BASE_URL"] == env["OPENAI_API_BASE"] == "http://127.0.0.1:9/v1"
    assert env["OPENAI_API_KEY"] == "sk-test-key" and env["HF_TOKEN"] is None
    assert env["EXTRA"] == "m@http://127.0.0.1:9/v1"
    assert env["HOME"] != os.environ.get("HOME") and env["XDG_CONFIG_HOME"].startswith(env["HOME"])
    assert not str(tmp_path) in env["HOME"]
    assert (tmp_path / "task_copy.md").read_text() == "Solve it."
    assert (tmp_path / "where.txt").read_text().strip() == str(tmp_path)


def test_a_harness_over_its_budget_is_killed_with_its_children(tmp_path):
    result = run_external_harness("sleep 30 & sleep 30; echo never > late.txt", base_url="http://x/v1", model="m",
                                  workdir=tmp_path, instruction="t", timeout_s=0.5)
    assert result.timed_out and result.stop_reason == "timeout" and result.exit_code is None
    assert result.wall_s < 10 and not (tmp_path / "late.txt").exists()


def test_should_stop_ends_the_harness_with_its_reason(tmp_path):
    calls = []

    def stop():
        calls.append(1)
        return "upstream_error" if len(calls) > 2 else None

    result = run_external_harness("sleep 30", base_url="http://x/v1", model="m", workdir=tmp_path,
                                  instruction="t", timeout_s=30, should_stop=stop, poll_s=0.05)
    assert result.stop_reason == "upstream_error" and not result.timed_out and result.wall_s < 10


def test_harness_specs_resolve_to_builtin_commands_or_presets():
    assert resolve_harness("builtin") is None
    assert resolve_harness('cmd:"echo hi"').command == "echo hi"
    assert "mini" in resolve_harness("mini-swe-agent").command
    assert "OPENCODE_CONFIG_CONTENT" in resolve_harness("opencode").env
    with pytest.raises(ValueError, match="unknown --harness"):
        resolve_harness("claude")
    with pytest.raises(ValueError, match="needs a command"):
        resolve_harness("cmd:")
