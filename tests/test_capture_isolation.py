"""Held-out isolation, tried as a hostile agent would: each attempt runs AS THE AGENT, through the local
backend's `script` policy driving the built-in harness, and must find nothing to read, write or keep."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
from pathlib import Path

import pytest

import rollout_dataset
from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig, capture_hidden_paths
from rollout_dataset.errors import SandboxUnavailableError
from rollout_dataset.sandbox import probe_isolation, run_in_sandbox, verify_solution
from rollout_dataset.tasks import builtin_data_path, load_tasks
from rollout_dataset.tasks.model import TestCase

needs_allow_list = pytest.mark.skipif(not probe_isolation().allow_list,
                                      reason="bubblewrap cannot build the allow-list root here (make test installs it)")

PACKAGE_DIR = Path(rollout_dataset.__file__).resolve().parent
CHECKOUT = PACKAGE_DIR.parent
TASK_DATA = Path(builtin_data_path())
OWN_MARKER = "OWN-HELD-OUT-4711"
TEMP_MARKER = "OTHER-ROLLOUT-TEMP-0042"
DONE = "ATTEMPT-FINISHED"

#: name -> shell command the agent runs (one `run` tool call each, in this order)
ATTEMPTS = {
    "checkout": (f"cat {CHECKOUT / 'README.md'} {CHECKOUT / 'pyproject.toml'}; ls -a {CHECKOUT}; "
                 f"ls {CHECKOUT / '.git'} /work/main/.git/objects; cat {TASK_DATA}; "
                 "python3 -c 'import rollout_dataset.tasks' 2>&1 | tail -1"),
    "siblings": "cat {sibling}/held_out_tests.json {own}/held_out_tests.json; ls -a {root}",
    "temp": "ls -a /tmp; cat {temp}/held_out_tests.json",
    "trace": "ls -d /tmp/rollout-trace-* 2>&1; for f in /tmp/rollout-trace-*/*; do : > \"$f\" && echo TRUNCATED; done",
    "etc": "cat /etc/shadow; ls /etc",
    "privileges": "id -u; grep CapEff /proc/self/status; (mount -t tmpfs none /tmp 2>&1 || echo MOUNT-REFUSED)",
    "fork": ("python3 -c \"import os, time\nn = 0\nfor _ in range(600):\n    try:\n        pid = os.fork()\n"
             "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(3)\n        os._exit(0)\n"
             "    n += 1\nprint('forked', n)\""),
    "disk": "for i in $(seq 12); do head -c 60M /dev/zero > big$i || break; done; du -sm .",
}


def _tool_results(out_dir: Path) -> list[str]:
    trace = json.loads((out_dir / "trace.json").read_text())
    last = trace["calls"][-1]["request"]["messages"]
    return [m["content"] for m in last if m.get("role") == "tool"]


@pytest.fixture(scope="module")
def attempts(tmp_path_factory):
    """Rollout A (oracle) writes its held-out tests; rollout B, next to it, runs every attempt as its agent."""
    base = tmp_path_factory.mktemp("isolation")
    root = base / "rollouts"
    capture_rollout(CaptureConfig(out_dir=root / "a", task_index=0, timeout_s=120))
    own = root / "b"
    own.mkdir()
    (own / "held_out_tests.json").write_text(json.dumps({"tests": [{"input": OWN_MARKER, "output": ""}]}))
    temp = Path(f"/tmp/rd-sandbox-other-{uuid.uuid4().hex[:8]}")  # another rollout's temp folder
    temp.mkdir()
    (temp / "held_out_tests.json").write_text(json.dumps({"tests": [{"input": TEMP_MARKER, "output": ""}]}))
    values = {"sibling": root / "a", "own": own, "root": root, "temp": temp}
    steps = [{"name": "run", "arguments": {"command": cmd.format(**values) + f"; echo {DONE}"}}
             for cmd in ATTEMPTS.values()]
    script = base / "script.json"
    script.write_text(json.dumps({"steps": steps + [{"name": "submit", "arguments": {}}]}))
    try:
        result = capture_rollout(CaptureConfig(out_dir=own, task_index=0, timeout_s=300, policy="script",
                                               script=script, max_turns=len(steps) + 2))
    finally:
        (temp / "held_out_tests.json").unlink()
        temp.rmdir()
    outputs = dict(zip(ATTEMPTS, _tool_results(own)))
    return result, outputs, root / "a", len(steps) + 1


@needs_allow_list
def test_the_agent_cannot_read_the_project_checkout_or_the_builtin_task_data(attempts):
    _, outputs, _, _ = attempts
    output = outputs["checkout"]
    assert DONE in output and "No such file" in output, output
    assert "[project]" not in output and "Threat model" not in output  # pyproject.toml, README.md
    assert TASK_DATA.read_text()[:200] not in output
    assert "ModuleNotFoundError" in output


@needs_allow_list
def test_the_agent_cannot_read_its_own_or_a_sibling_rollouts_held_out_tests(attempts):
    _, outputs, sibling, _ = attempts
    output = outputs["siblings"]
    held = json.loads((sibling / "held_out_tests.json").read_text())["tests"]
    assert held and DONE in output and output.count("No such file") == 3, output
    assert OWN_MARKER not in output and not any(json.dumps(t["input"]) in output for t in held)


@needs_allow_list
def test_the_agent_sees_a_private_tmp_without_other_rollouts_temp_folders(attempts):
    output = attempts[1]["temp"]
    listing = output.split("stderr:")[0]
    assert DONE in listing and "rd-sandbox-other" not in listing, output
    assert TEMP_MARKER not in output and "No such file" in output


@needs_allow_list
def test_the_agent_can_neither_see_nor_truncate_the_sessions_trace(attempts):
    result, outputs, _, calls = attempts
    assert "TRUNCATED" not in outputs["trace"] and "No such file" in outputs["trace"], outputs["trace"]
    assert result.summary["captured_calls"] == calls, "every call of the rollout is in the record"


@needs_allow_list
def test_the_agent_cannot_read_host_secrets_in_etc(attempts):
    output = attempts[1]["etc"]
    assert "root:" not in output.split("passwd")[0] and "No such file" in output, output
    assert "shadow" not in output.replace("cat: /etc/shadow", "")


@needs_allow_list
def test_the_agent_runs_unprivileged_without_capabilities(attempts):
    output = attempts[1]["privileges"]
    uid = int(re.search(r"stdout:\n(\d+)\n", output).group(1))
    assert uid != 0 and "CapEff:\t0000000000000000" in output and "MOUNT-REFUSED" in output, output


@needs_allow_list
def test_a_fork_bomb_is_bounded_by_the_process_limit(attempts):
    output = attempts[1]["fork"]
    forked = [line for line in output.splitlines() if line.startswith("forked ")]
    assert forked and int(forked[0].split()[1]) < 300, output


@needs_allow_list
def test_writing_665_mb_is_capped_by_the_working_directory_limit(attempts):
    output = attempts[1]["disk"]
    assert "working-directory size limit of 256 MiB exceeded" in output and DONE not in output, output


@needs_allow_list
def test_the_capture_records_its_isolation_level_and_still_writes_its_held_out_tests(attempts):
    result, _, _, _ = attempts
    assert result.summary["isolation"] == "allow-list"
    held = json.loads((result.out_dir / "held_out_tests.json").read_text())
    assert held["tests"] and OWN_MARKER not in json.dumps(held)


@needs_allow_list
def test_a_solution_cannot_leave_the_held_out_inputs_where_a_later_command_reads_them(tmp_path):
    secret = f"HELD-OUT-INPUT-{uuid.uuid4().hex}"
    task = dataclasses.replace(load_tasks("builtin", n_prompts=4, seed=0)[0],
                               held_out_tests=[TestCase(input=secret + "\n", output="")])
    marker = f"rd-leak-{uuid.uuid4().hex[:8]}"
    targets = [f"/tmp/{marker}", f"/var/tmp/{marker}", f"/dev/shm/{marker}", f"{tmp_path}/{marker}",
               f"/{marker}"]
    solution = ("import os, sys\ndata = sys.stdin.read()\n"
                f"for path in {targets!r} + [os.path.join(os.path.dirname(os.getcwd()), {marker!r})]:\n"
                "    try:\n        open(path, 'a').write(data)\n    except OSError:\n        pass\n")
    assert verify_solution(task, solution, workers=1).total == 1
    later = run_in_sandbox(f"cat /tmp/{marker} /var/tmp/{marker} /dev/shm/{marker} {tmp_path}/{marker} 2>&1; "
                           f"ls -a /tmp /dev/shm")
    assert later.stdout.count("No such file") == 4 and secret not in later.stdout, later.stdout
    assert not any(os.path.exists(p) for p in targets), "nothing the solution wrote survives on the host"


def test_without_the_allow_list_root_capture_refuses_before_running_anything(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLOUT_DATASET_SANDBOX_ISOLATION", "off")
    probe_isolation.cache_clear()
    try:
        with pytest.raises(SandboxUnavailableError, match="--unsafe-sandbox"):
            capture_rollout(CaptureConfig(out_dir=tmp_path / "r", task_index=0, timeout_s=60))
        assert not (tmp_path / "r").exists()
        opted_out = capture_rollout(CaptureConfig(out_dir=tmp_path / "u", task_index=0, timeout_s=60,
                                                  unsafe_sandbox=True))
    finally:
        monkeypatch.delenv("ROLLOUT_DATASET_SANDBOX_ISOLATION")
        probe_isolation.cache_clear()
    assert opted_out.ok and opted_out.summary["isolation"] == "unsafe"
    assert json.loads((tmp_path / "u" / "summary.json").read_text())["isolation"] == "unsafe"


def test_the_output_folder_and_extra_paths_are_masked_too(tmp_path):
    task = load_tasks("builtin", n_prompts=4, seed=0)[0]
    out = tmp_path / "batch" / "rollouts" / "r1"
    extra = tmp_path / "batch" / "dataset"
    assert capture_hidden_paths(task, out, [extra]) == [out.resolve(), extra.resolve()]


def test_a_file_task_source_is_masked_too(tmp_path):
    source = tmp_path / "tasks.jsonl"
    source.write_text("{}\n")

    class _Task:
        pass

    task = _Task()
    task.source = f"file:{source}"
    assert source.resolve() in capture_hidden_paths(task, tmp_path / "out")


def test_the_cli_refuses_without_the_sandbox_naming_the_opt_out(tmp_path, monkeypatch, capsys):
    from rollout_dataset.cli import main as cli_main

    monkeypatch.setenv("ROLLOUT_DATASET_SANDBOX_ISOLATION", "off")
    probe_isolation.cache_clear()
    try:
        code = cli_main(["capture", "--out-dir", str(tmp_path / "r"), "--no-push"])
    finally:
        monkeypatch.delenv("ROLLOUT_DATASET_SANDBOX_ISOLATION")
        probe_isolation.cache_clear()
    assert code == 1 and "--unsafe-sandbox" in capsys.readouterr().err and not (tmp_path / "r").exists()
