"""The bubblewrap environment of a Harbor task against a hostile agent (docs/harbor.md, "The
environment"): what the agent runs cannot see or signal the host's processes, and nothing it leaves
running outlives its turn into the verifier's, where it could rewrite the tests or the reward."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.harbor.adapter import find_harbor
from rollout_dataset.harbor.bwrap_root import TaskRoot
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.tasks import load_tasks
from rollout_dataset.tasks.harbor_format import HARBOR_BUILTIN_SOURCE

needs_harbor = pytest.mark.skipif(find_harbor() is None, reason="Harbor is not installed (make harbor)")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed (make system-deps)")
# every test here builds Harbor environment roots: never while a test checks the machine for leftovers (conftest.py)
pytestmark = pytest.mark.usefixtures("harbor_environment")


@needs_bwrap
def test_a_command_in_the_task_root_can_neither_see_nor_signal_a_host_process():
    victim = subprocess.Popen(["sleep", "60"])
    root = TaskRoot()
    try:
        root.build()
        for held in (False, True):  # a one-off command (the host-side verifier) and the environment's shared namespace
            if held:
                root.start_processes()
            code, out = root.run(f"ls /proc/{victim.pid} >/dev/null 2>&1 && echo seen; kill -9 {victim.pid}; "
                                 "ls /proc | grep -c '^[0-9]'", 20)
            assert "seen" not in out and int(out.split()[-1]) < 10, out
            assert victim.poll() is None
    finally:
        root.close()
        victim.kill()
        victim.wait()


@needs_bwrap
def test_a_process_that_dropped_its_marker_is_killed_with_the_environment():
    root = TaskRoot()
    try:
        root.build()
        root.start_processes()
        root.run("env -u ROLLOUT_HARBOR_ENV setsid bash -c 'exec -a hidden-survivor sleep 300' >/dev/null 2>&1 &", 20)
        time.sleep(0.3)
        assert subprocess.run(["pgrep", "-f", "hidden-survivor"], capture_output=True).returncode == 0
    finally:
        root.close()
    assert subprocess.run(["pgrep", "-f", "hidden-survivor"], capture_output=True).returncode == 1


@needs_bwrap
def test_the_host_side_verifier_takes_no_reward_file_that_is_a_symlink(tmp_path):
    from rollout_dataset.recipes.coding.harbor_tasks import read_reward

    host_one = tmp_path / "host-one.txt"
    host_one.write_text("1\n")
    root = TaskRoot()
    try:
        root.build()
        root.run(f"ln -s {host_one} /logs/verifier/reward.txt", 20)  # what a solution run by tests/test.sh can do
        reward, why = read_reward(root.host_path("/logs/verifier"))
    finally:
        root.close()
    assert reward is None and "reward.txt is a symlink" in why


def _terminus_step(keystrokes: str, done: bool = False) -> str:
    return json.dumps({"analysis": "a", "plan": "p", "commands": [{"keystrokes": keystrokes, "duration": 0.5}]
                       if keystrokes else [], "task_complete": done})


@needs_harbor
@needs_bwrap
def test_a_background_process_the_agent_left_cannot_forge_the_reward(tmp_path):
    forger = ("nohup bash -c 'while :; do mkdir -p /logs/verifier /tests; echo 1 > /logs/verifier/reward.txt; "
              "printf \"echo 1 > /logs/verifier/reward.txt\\n\" > /tests/test.sh; sleep 0.01; done' "
              ">/dev/null 2>&1 &\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [_terminus_step(forger), _terminus_step("", True), _terminus_step("", True)],
                                  "final": _terminus_step("", True)}))
    index = [t.task_id for t in load_tasks(HARBOR_BUILTIN_SOURCE)].index("vowel-count")
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="terminus-2", tasks=HARBOR_BUILTIN_SOURCE,
                                           task_index=index, policy="script", script=script))
    assert result.summary["harbor"]["reward_source"] == "harbor_verifier"
    assert result.summary["env_reward"] == 0.0  # no solution.py: the real tests ran and scored it, nothing else


@pytest.mark.parametrize("link", ["instruction.md", "tests/cases.json", "solution", "environment/notes.txt"])
def test_a_task_file_linking_out_of_its_folder_is_refused_before_anything_reads_it(tmp_path, link):
    from rollout_dataset.errors import TaskSourceError
    from rollout_dataset.tasks.harbor_format import HARBOR_BUILTIN_DIR

    task = tmp_path / "tasks" / "vowel-count"
    shutil.copytree(HARBOR_BUILTIN_DIR / "vowel-count", task)
    secret = tmp_path / "host-secret.txt"
    secret.write_text("a host file no task may carry into the dataset\n")
    planted = task / link
    if planted.is_dir():
        shutil.rmtree(planted)
    else:
        planted.unlink(missing_ok=True)
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(secret if link != "solution" else tmp_path)
    with pytest.raises(TaskSourceError) as caught:
        load_tasks(str(task.parent))
    assert str(planted) in str(caught.value) and "outside the task folder" in str(caught.value)


def test_a_task_file_linking_inside_its_folder_is_taken(tmp_path):
    from rollout_dataset.tasks.harbor_format import HARBOR_BUILTIN_DIR

    task = tmp_path / "tasks" / "vowel-count"
    shutil.copytree(HARBOR_BUILTIN_DIR / "vowel-count", task)
    (task / "tests" / "again.json").symlink_to(task / "tests" / "cases.json")
    assert [t.task_id for t in load_tasks(str(task.parent))] == ["vowel-count"]


@needs_harbor
@needs_bwrap
def test_a_reward_file_the_solution_links_to_a_host_file_scores_nothing(tmp_path):
    host_one = tmp_path / "host-one.txt"  # a host file that happens to hold "1" (as many /proc/sys files do)
    host_one.write_text("1\n")
    solution = f"import os\nos.symlink({str(host_one)!r}, '/logs/verifier/reward.txt')\n"  # run by tests/test.sh
    encoded = base64.b64encode(solution.encode()).decode()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [_terminus_step(f"mkdir -p /app; echo {encoded} | base64 -d > /app/solution.py\n"),
                                            _terminus_step("", True), _terminus_step("", True)],
                                  "final": _terminus_step("", True)}))
    index = [t.task_id for t in load_tasks(HARBOR_BUILTIN_SOURCE)].index("vowel-count")
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="terminus-2", tasks=HARBOR_BUILTIN_SOURCE,
                                           task_index=index, policy="script", script=script))
    # the built-in test.sh replaces the planted link with its own reward: the true 0.0, never the host file's "1"
    # (a reward file still a symlink when read is refused: tests/test_harbor_task_verifier.py)
    assert result.summary["env_reward"] == 0.0



def _builtin_rollout_verified_by(tmp_path, test_sh: str) -> dict:
    """The summary of a built-in harness rollout on vowel-count whose tests/test.sh is `test_sh` (bash)."""
    from rollout_dataset.tasks.harbor_format import HARBOR_BUILTIN_DIR

    task = tmp_path / "tasks" / "vowel-count"
    shutil.copytree(HARBOR_BUILTIN_DIR / "vowel-count", task)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + test_sh)
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="builtin", tasks=str(task.parent),
                                           rollout_seed=0))
    assert result.ok, result.errors
    return result.summary

@needs_harbor
@needs_bwrap
@pytest.mark.parametrize("written", ["nan", "1.5"])
def test_a_verifier_reward_that_is_no_number_in_0_1_leaves_the_rollout_unscored_with_the_value(tmp_path, written):
    summary = _builtin_rollout_verified_by(tmp_path, f"mkdir -p /logs/verifier\necho {written} > /logs/verifier/reward.txt\n")
    assert summary["env_reward"] is None
    assert f"reward {float(written)!r} is not a number in [0, 1]" in summary["unscored_reason"]


@needs_bwrap
@pytest.mark.parametrize("planted", ["etc", "tmp", "logs", "etc/passwd"])
def test_rebuilding_the_root_before_the_verifier_writes_nothing_through_a_link_the_agent_planted(tmp_path, planted):
    host = tmp_path / "host-folder"  # stands for the host's /etc, /: what the link names on the host
    host.mkdir()
    root = TaskRoot()
    try:
        root.build()
        root.start_processes()
        code, out = root.run(f"mv /{planted} /{planted}.old && ln -s {host} /{planted} && echo planted", 20)
        assert "planted" in out, out
        root.build()  # what the environment does when Harbor uploads /tests
        assert list(host.iterdir()) == [] and oct(host.stat().st_mode & 0o7777) == "0o755"
        assert (root.root / "etc" / "passwd").read_text().startswith("root:x:0:0")
        assert not (root.root / planted).is_symlink()
    finally:
        root.close()


@needs_bwrap
def test_rebuilding_the_root_puts_back_the_bin_links_the_agent_replaced():
    root = TaskRoot()
    try:
        root.build()
        linked = [name for name in ("bin", "lib", "lib64") if (root.root / name).is_symlink()]
        if not linked:
            pytest.skip("this host's /bin and /lib are folders (bound read-only), not links")
        root.run(f"rm /{linked[0]} && mkdir /{linked[0]} && echo 'echo forged' > /{linked[0]}/fake", 20)
        root.build()
        assert (root.root / linked[0]).is_symlink()
        assert os.readlink(root.root / linked[0]) == os.readlink(f"/{linked[0]}")
    finally:
        root.close()


@needs_harbor
@needs_bwrap
def test_a_verifier_killed_by_a_signal_after_writing_reward_1_scores_0_and_the_summary_says_why(tmp_path):
    summary = _builtin_rollout_verified_by(tmp_path, "mkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\nkill -9 $$\n")
    assert summary["env_reward"] == 0.0
    assert "killed by signal 9" in summary["harbor"]["verifier_note"]


@needs_harbor
@needs_bwrap
def test_a_verifier_run_that_links_its_reward_folder_out_of_the_root_leaves_the_rollout_unscored(tmp_path):
    summary = _builtin_rollout_verified_by(tmp_path, "rm -rf /logs/verifier; ln -s /etc /logs/verifier\n"
                                                     "echo 1 > /logs/verifier/reward.txt\n")
    assert summary["env_reward"] is None
    assert "leads outside the environment's root" in summary["unscored_reason"]


@needs_harbor
@needs_bwrap
def test_an_agent_cannot_replace_terminus_2s_trajectory_through_its_log_folder(tmp_path):
    forged = {"schema_version": "ATIF-v1.8", "session_id": "forged", "agent": {"name": "forged", "version": "1"},
              "steps": [{"step_id": 1, "source": "user", "message": "forged"}]}
    encoded = base64.b64encode(json.dumps(forged).encode()).decode()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [_terminus_step(f"echo {encoded} | base64 -d > /logs/agent/trajectory.json\n"),
                                            _terminus_step("", True), _terminus_step("", True)],
                                  "final": _terminus_step("", True)}))
    index = [t.task_id for t in load_tasks(HARBOR_BUILTIN_SOURCE)].index("vowel-count")
    out = tmp_path / "out"
    capture_rollout(CaptureConfig(out_dir=out, harness="terminus-2", tasks=HARBOR_BUILTIN_SOURCE, task_index=index,
                                  policy="script", script=script))
    kept = json.loads((out / "harbor_trajectory.json").read_text())
    assert kept["agent"]["name"] == "terminus-2" and kept["session_id"] != "forged"
