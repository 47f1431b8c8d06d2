"""External harnesses: the command runner (placeholders, environment, isolated HOME, stopping), the
sandbox they run in (held-out data hidden), and two real third-party harnesses, mini-swe-agent and
opencode, captured end to end."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.errors import SandboxUnavailableError
from rollout_dataset.harness import external
from rollout_dataset.harness import (
    find_mini,
    find_opencode,
    resolve_harness,
    run_external_harness,
    substitute_placeholders,
)
from rollout_dataset.sandbox import isolation
from rollout_dataset.sandbox.isolation import probe_isolation
from rollout_dataset.schema.check import validate_path
from rollout_dataset.tasks import load_tasks

needs_mounts = pytest.mark.skipif(not probe_isolation().allow_list,
                                  reason="bubblewrap cannot build the allow-list root here (make test installs it)")

TASK_DATA = Path(isolation.__file__).resolve().parent.parent / "tasks" / "data" / "builtin_tasks.yaml"
CONTROL_MARKER = "CONTROL-FILE-READABLE-0815"


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
    assert str(tmp_path) not in env["HOME"]
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


def test_a_harness_writing_past_its_disk_limit_is_stopped_and_the_stop_named(tmp_path, monkeypatch):
    # 3 MiB in the working directory and 3 MiB in HOME: over a 4 MiB limit only together
    monkeypatch.setattr(external, "HARNESS_LIMITS", replace(external.HARNESS_LIMITS, workdir_mb=4))
    command = ('head -c 3M /dev/zero > big.bin; head -c 3M /dev/zero > "$HOME/cache.bin"; sleep 30; '
               "echo never > late.txt")
    result = run_external_harness(command, base_url="http://x/v1", model="m", workdir=tmp_path, instruction="t",
                                  timeout_s=15, poll_s=0.05)
    assert result.stop_reason == "disk_limit" and not result.timed_out and result.exit_code is None
    assert (tmp_path / "big.bin").stat().st_size == 3 << 20
    assert result.wall_s < 10 and not (tmp_path / "late.txt").exists()


# --- the sandbox around an external harness ----------------------------------------------------------

def _probe_command(*paths) -> str:
    """A shell command writing each file's text (or the error reading it) to probe.txt."""
    return "exec > probe.txt 2>&1; " + "; ".join(f"echo '== {p}'; cat {p}" for p in paths)


@needs_mounts
def test_an_external_harness_cannot_read_the_builtin_task_data_or_files_outside_its_root(tmp_path):
    secret = tmp_path / "private" / "held_out_tests.json"
    secret.parent.mkdir()
    secret.write_text('{"tests": [{"input": "HIDDEN-4711", "output": ""}]}')
    work = tmp_path / "work"
    work.mkdir()
    control = work / "control.txt"
    control.write_text(CONTROL_MARKER)
    result = run_external_harness(_probe_command(TASK_DATA, secret, control),
                                  base_url="http://127.0.0.1:9/v1", model="m", workdir=work, instruction="t",
                                  timeout_s=30)
    probe = (work / "probe.txt").read_text()
    assert result.exit_code == 0 and CONTROL_MARKER in probe, probe
    assert TASK_DATA.stat().st_size > 1000 and TASK_DATA.read_text()[:200] not in probe
    assert "HIDDEN-4711" not in probe and probe.count("No such file") == 2, probe


def test_without_the_allow_list_root_a_harness_runs_only_when_the_user_opts_out(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLOUT_DATASET_SANDBOX_ISOLATION", "off")
    probe_isolation.cache_clear()
    try:
        with pytest.raises(SandboxUnavailableError, match="--unsafe-sandbox"):
            run_external_harness("echo ran > refused.txt", base_url="http://x/v1", model="m",
                                 workdir=tmp_path, instruction="t", timeout_s=30)
        result = run_external_harness("echo ran > ran.txt", base_url="http://x/v1", model="m",
                                      workdir=tmp_path, instruction="t", timeout_s=30, unsafe=True)
    finally:
        monkeypatch.delenv("ROLLOUT_DATASET_SANDBOX_ISOLATION")
        probe_isolation.cache_clear()
    assert not (tmp_path / "refused.txt").exists()
    assert result.exit_code == 0 and (tmp_path / "ran.txt").read_text() == "ran\n"


@needs_mounts
def test_a_captured_cmd_harness_cannot_read_its_own_or_a_siblings_held_out_tests(tmp_path):
    root = tmp_path / "rollouts"
    sibling, own = root / "a", root / "b"
    for folder, marker in ((sibling, "SIBLING-HELD-OUT-0042"), (own, "OWN-HELD-OUT-4711")):
        folder.mkdir(parents=True)
        (folder / "held_out_tests.json").write_text(json.dumps({"tests": [{"input": marker, "output": ""}]}))
    command = (_probe_command(TASK_DATA, sibling / "held_out_tests.json", own / "held_out_tests.json")
               + f"; echo {CONTROL_MARKER}; ls -a {root}; true")
    result = capture_rollout(CaptureConfig(out_dir=own, harness="cmd:" + command, base_url="http://127.0.0.1:9/v1",
                                           model="m", timeout_s=60, keep_workdir=True))
    probe = (own / "workdir" / "probe.txt").read_text()
    assert result.summary["harness_exit_code"] == 0 and CONTROL_MARKER in probe, probe
    assert "SIBLING-HELD-OUT" not in probe and "OWN-HELD-OUT" not in probe
    assert probe.count("No such file") == 4 and TASK_DATA.read_text()[:200] not in probe
    assert probe.endswith(CONTROL_MARKER + f"\nls: cannot access '{root}': No such file or directory\n"), probe
    assert result.summary["isolation"] == "allow-list"
    assert not result.summary["leakage"]["hits"]


@needs_mounts
def test_a_cmd_harness_runs_a_script_it_names_but_cannot_read_the_folder_around_it(tmp_path):
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "secret.txt").write_text("HIDDEN-NEXT-TO-THE-SCRIPT")
    script = agents / "agent.py"
    script.write_text("import pathlib, sys\nprint('agent ran')\n"
                      "try:\n    print(pathlib.Path(sys.argv[0]).with_name('secret.txt').read_text())\n"
                      "except OSError as exc:\n    print('refused', type(exc).__name__)\n")
    work = tmp_path / "work"
    work.mkdir()
    result = run_external_harness(f"python3 {script}", base_url="http://127.0.0.1:9/v1", model="m", workdir=work,
                                  instruction="t", timeout_s=30)
    assert result.stdout_tail.split("\n")[:2] == ["agent ran", "refused FileNotFoundError"], result.stderr_tail


def test_sandbox_ro_refuses_a_path_that_would_expose_the_task_data_or_the_output(tmp_path):
    from rollout_dataset.sandbox.isolation import check_sandbox_ro_paths

    with pytest.raises(ValueError, match="would expose"):
        check_sandbox_ro_paths([TASK_DATA.parents[2]])
    with pytest.raises(ValueError, match="would expose"):
        check_sandbox_ro_paths([tmp_path], protected=[tmp_path / "out"])
    check_sandbox_ro_paths([tmp_path / "work"] if (tmp_path / "work").mkdir() is None else [])


def test_harness_specs_resolve_to_builtin_commands_or_presets():
    assert resolve_harness("builtin") is None
    assert resolve_harness('cmd:"echo hi"').command == "echo hi"
    assert "mini" in resolve_harness("mini-swe-agent").command
    assert "OPENCODE_CONFIG_CONTENT" in resolve_harness("opencode").env
    with pytest.raises(ValueError, match="unknown --harness"):
        resolve_harness("claude")
    with pytest.raises(ValueError, match="needs a command"):
        resolve_harness("cmd:")


# --- two real third-party harnesses, offline against the local backend's `script` policy -------------
# One script drives both: write solution.py with the bash tool, then mini-swe-agent's end marker
# (a harmless echo for opencode), then a final text (opencode stops on a text-only answer).

TASK_INDEX = 3


@pytest.fixture(scope="module")
def real_captures(tmp_path_factory):
    """Capture mini-swe-agent and opencode (when installed) concurrently; name -> (result, trace, rollout)."""
    assert find_mini(), "mini-swe-agent is a test dependency (pip install -e '.[test]')"
    task = load_tasks("builtin", seed=0)[TASK_INDEX]
    write = "cat > solution.py <<'EOF'\n" + task.reference_solution.rstrip() + "\nEOF"
    steps = [{"text": "I will write the solution.",
              "tool_calls": [{"name": "bash", "arguments": {"command": write, "description": "Write solution.py"}}]},
             {"text": "Done.", "tool_calls": [{"name": "bash", "arguments": {
                 "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "description": "Finish"}}]}]
    root = tmp_path_factory.mktemp("real-harnesses")
    script = root / "script.json"
    script.write_text(json.dumps({"steps": steps, "final": "solution.py is written."}))
    harnesses = ["mini-swe-agent"] + (["opencode"] if find_opencode() else [])

    def capture(name):
        out = root / name
        result = capture_rollout(CaptureConfig(out_dir=out, task_index=TASK_INDEX, harness=name, policy="script",
                                               script=script, timeout_s=150))
        return name, (result, json.loads((out / "trace.json").read_text()),
                      json.loads((out / "rollout.json").read_text()))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(capture, harnesses))


@pytest.mark.harness
def test_mini_swe_agent_solves_through_the_proxy_and_its_capture_validates(real_captures):
    result, trace, _ = real_captures["mini-swe-agent"]
    assert result.ok, (result.errors, result.validation_failures)
    assert validate_path(result.out_dir) == []
    summary = result.summary
    assert summary["harness"] == "mini-swe-agent" and summary["harness_exit_code"] == 0
    assert summary["env_reward"] == 1.0 and summary["tool_calls_by_name"] == {"bash": 2}
    assert summary["capture_level"] == "tokens" and summary["trainable"]
    calls = trace["calls"]
    assert [c["stream"] for c in calls] == [False, False]
    assert all([t["function"]["name"] for t in c["request"]["tools"]] == ["bash"] for c in calls)


@pytest.mark.harness
def test_opencode_streams_through_the_proxy_with_its_title_call_and_its_capture_validates(real_captures):
    if "opencode" not in real_captures:
        pytest.skip("opencode is not installed: run `make npm-tools` (make test does)")
    result, trace, document = real_captures["opencode"]
    assert result.ok, (result.errors, result.validation_failures)
    assert validate_path(result.out_dir) == []
    summary = result.summary
    assert summary["harness"] == "opencode" and summary["env_reward"] == 1.0
    assert summary["tool_calls_by_name"] == {"bash": 2} and summary["agent_turns"] == 3
    generation = [c for c in trace["calls"] if c["endpoint"] == "/v1/chat/completions"]
    assert all(c["stream"] for c in generation) and len(generation) == 4
    tool_counts = sorted(len(c["request"].get("tools") or []) for c in generation)
    assert tool_counts == [0, 10, 10, 10]  # the toolless title call, then the agent's calls with 10 tools
    assert {s["role"] for s in document["sequences"]} == {"agent", "auxiliary"}
    # opencode re-encodes tool-call arguments with JSON.stringify; vLLM (and the local backend) parse them
    # before templating, so the agent's three calls still extend one another token for token.
    agent = [s for s in document["sequences"] if s["role"] == "agent"]
    assert len(agent) == 1 and agent[0]["n_turns"] == 3
    assert "retokenization_skew" not in json.dumps(document)
