"""The host-side verifier of a Harbor task run by another harness (`verify_harbor_task`), against a
solution that games it instead of solving the task."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rollout_dataset.package_paths import TASK_PACKAGE_DIR
from rollout_dataset.recipes.coding.harbor_tasks import read_reward, verify_harbor_task
from rollout_dataset.sandbox import probe_isolation

SUM_TASK = TASK_PACKAGE_DIR / "data" / "harbor" / "sum-of-integers"
needs_bwrap = pytest.mark.skipif(not probe_isolation().allow_list, reason="bubblewrap cannot build a root here")
# every test here builds Harbor environment roots: never while a test checks the machine for leftovers (conftest.py)
pytestmark = pytest.mark.usefixtures("harbor_environment")


def _workdir(tmp_path: Path, files: dict[str, str]) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    return work


def test_a_reward_file_that_is_a_symlink_is_not_followed(tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("1\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "reward.txt").symlink_to(one)
    reward, why = read_reward(tmp_path / "logs")
    assert reward is None and "symlink" in why


@needs_bwrap
def test_a_solution_that_links_the_reward_file_to_a_host_file_reading_one_is_not_rewarded(tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("1\n")
    planted = f"import os\nos.symlink({str(one)!r}, '/logs/verifier/reward.txt')\n"
    reward, _why = verify_harbor_task(SUM_TASK, _workdir(tmp_path, {"solution.py": planted}), {})
    assert reward is None or reward < 0.5


@needs_bwrap
def test_a_module_next_to_the_solution_does_not_shadow_the_verifiers_imports(tmp_path):
    fake_json = ("import os\nos.makedirs('/logs/verifier', exist_ok=True)\n"
                 "open('/logs/verifier/reward.txt', 'w').write('1.0')\nos._exit(0)\n")
    work = _workdir(tmp_path, {"solution.py": "print(0)\n", "json.py": fake_json})
    reward, why = verify_harbor_task(SUM_TASK, work, {})
    assert reward is not None and reward < 0.5, why


@needs_bwrap
def test_the_solution_cannot_read_the_held_out_cases(tmp_path):
    lookup = ("import json, sys\ndata = sys.stdin.read()\n"
              "for case in json.load(open('/tests/cases.json')):\n"
              "    if case['input'] == data:\n        print(case['output'], end='')\n")
    reward, why = verify_harbor_task(SUM_TASK, _workdir(tmp_path, {"solution.py": lookup}), {})
    assert reward == 0.0, why


@needs_bwrap
def test_the_reference_solution_still_scores_one(tmp_path):
    reference = (SUM_TASK / "solution" / "solve.sh").read_text()
    start = reference.index("import sys")
    source = reference[start:reference.index("\nEOF", start)] + "\n"
    reward, why = verify_harbor_task(SUM_TASK, _workdir(tmp_path, {"solution.py": source}), {})
    assert reward == 1.0, why


@needs_bwrap
def test_a_verifier_run_cannot_signal_a_host_process(tmp_path):
    import subprocess

    from rollout_dataset.harbor.bwrap_root import TaskRoot

    host = subprocess.Popen(["sleep", "30"])
    root = TaskRoot("/app")
    try:
        root.build()
        code, output = root.run(f"kill -9 {host.pid}; echo kill=$?", 10)
        assert host.poll() is None, output
        assert "kill=1" in output
    finally:
        root.close()
        host.kill()
        host.wait()


@needs_bwrap
def test_a_solution_that_writes_a_reward_and_kills_the_verifier_is_not_rewarded(tmp_path):
    kill_verifier = ("import os, signal\nopen('/logs/verifier/reward.txt', 'w').write('1')\n"
                     "os.kill(os.getppid(), signal.SIGKILL)\n")
    reward, why = verify_harbor_task(SUM_TASK, _workdir(tmp_path, {"solution.py": kill_verifier}), {})
    assert reward == 0.0, why


@needs_bwrap
def test_a_solution_that_writes_a_reward_and_kills_test_sh_too_scores_zero_not_null(tmp_path):
    kill_both = ("import os, signal\nopen('/logs/verifier/reward.txt', 'w').write('1')\n"
                 "parent = os.getppid()\nshell = int(open(f'/proc/{parent}/stat').read().rsplit(')', 1)[1].split()[1])\n"
                 "os.kill(shell, signal.SIGKILL)\nos.kill(parent, signal.SIGKILL)\n")
    reward, why = verify_harbor_task(SUM_TASK, _workdir(tmp_path, {"solution.py": kill_both}), {})
    assert (reward, why) == (0.0, "the verifier was killed by signal 9; its reward file was not read (scored 0)")


@needs_bwrap
def test_a_solution_too_slow_for_every_case_scores_0_before_the_verifier_times_out(tmp_path):
    task = tmp_path / "task"
    shutil.copytree(SUM_TASK, task)
    script = task / "tests" / "test.sh"
    script.write_text(script.read_text().replace("BUDGET_S = 40", "BUDGET_S = 2"))  # the same test.sh, a short budget
    sleeper = _workdir(tmp_path, {"solution.py": "import time\ntime.sleep(1000)\n"})
    # each case's own 10 s limit would add up past the verifier's timeout: null, where failing scores 0
    reward, why = verify_harbor_task(task, sleeper, {"verifier_timeout_sec": 20})
    assert (reward, why) == (0.0, None)
