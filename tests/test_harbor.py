"""Harbor tasks and terminus-2 (`--harness terminus-2`): the task source, the bubblewrap environment,
rollouts on the embedded local backend, and the hostile cases.

The rollouts need Harbor (`make harbor`, which `make test` runs); each takes a few seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout_dataset.artifact_files import ROLLOUT_FILE, SUMMARY_FILE, TRAJECTORY_FILE
from rollout_dataset.atif.importer import AtifSource, import_documents
from rollout_dataset.capture import capture_rollout
from rollout_dataset.errors import ConfigError, TaskSourceError
from rollout_dataset.harbor.adapter import (ENVIRONMENT_SPEC, HarborTaskUnsupportedError, dockerfile_needs,
                                            environment_for, find_harbor)
from rollout_dataset.harbor.bwrap_root import TIMEOUT_EXIT, TaskRoot
from rollout_dataset.harbor.reaper import marked_pids
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.recipes.coding.harbor_tasks import HARBOR_TRAJECTORY_FILE, crosscheck_trajectory
from rollout_dataset.schema.check import check_artifact_dir
from rollout_dataset.tasks import load_tasks
from rollout_dataset.tasks.harbor_format import HARBOR_BUILTIN_DIR, HARBOR_BUILTIN_SOURCE

needs_harbor = pytest.mark.skipif(find_harbor() is None, reason="Harbor is not installed (make harbor)")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed (make system-deps)")
# every test here builds Harbor environment roots (never while a test checks the machine for leftovers); those
# that check it (`_leftovers`) run alone: `alone` (conftest.py)
pytestmark = pytest.mark.usefixtures("harbor_environment")
alone = pytest.mark.usefixtures("harbor_alone")
VOWEL = "vowel-count"


def _index(task_id: str) -> int:
    return [t.task_id for t in load_tasks(HARBOR_BUILTIN_SOURCE)].index(task_id)


def _copy_task(tmp_path: Path, name: str = VOWEL) -> Path:
    dest = tmp_path / "tasks" / name
    shutil.copytree(HARBOR_BUILTIN_DIR / name, dest)
    return dest


def _leftovers() -> list[str]:
    """Environment roots left in the temp folder and processes still carrying an environment marker."""
    import tempfile

    roots = [p.name for p in Path(tempfile.gettempdir()).glob("rollout-harbor-env-*")]
    out = subprocess.run(["sh", "-c", "grep -l ROLLOUT_HARBOR_ENV= /proc/[0-9]*/environ 2>/dev/null"],
                         capture_output=True, text=True).stdout.split()
    return roots + [p for p in out if f"/proc/{os.getpid()}/" not in p]


# -- the task source ------------------------------------------------------------------------------


def test_a_folder_of_harbor_tasks_is_a_task_source_with_its_toml_fields():
    tasks = load_tasks(str(HARBOR_BUILTIN_DIR), n_prompts=10)
    task = next(t for t in tasks if t.task_id == VOWEL)
    assert task.instruction == (HARBOR_BUILTIN_DIR / VOWEL / "instruction.md").read_text()
    assert task.metadata["harbor"] == {"agent_timeout_sec": 300.0, "verifier_timeout_sec": 60.0, "workdir": "/app",
                                       "network_mode": "no-network", "cpus": 1, "memory_mb": 1024,
                                       "docker_image": None}
    assert task.held_out_tests == () and task.visible_tests  # the examples come from instruction.md
    assert any("cases.json" in text or "/tests/cases.json" in text for text in task.metadata["held_out_text"])


def test_a_harbor_task_without_tests_or_with_bad_toml_is_refused_by_name(tmp_path):
    task = _copy_task(tmp_path)
    (task / "tests" / "test.sh").unlink()
    with pytest.raises(TaskSourceError, match=r"tests/test.sh is missing"):
        load_tasks(str(task))
    (task / "tests" / "test.sh").write_text("exit 0\n")
    (task / "task.toml").write_text("[agent]\ntimeout_sec = -1\n")
    with pytest.raises(TaskSourceError, match=r"agent.timeout_sec must be a positive number"):
        load_tasks(str(task))


def test_a_dockerfile_that_installs_something_is_refused_by_bwrap_naming_the_line(tmp_path):
    task = _copy_task(tmp_path)
    assert dockerfile_needs(task) == [] and environment_for(task) == ENVIRONMENT_SPEC
    (task / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nRUN apt-get install -y \\\n  gcc\nWORKDIR /app\n")
    assert dockerfile_needs(task) == ["RUN apt-get install -y gcc"]
    with pytest.raises(HarborTaskUnsupportedError, match=r"RUN apt-get install -y gcc.*--harbor-env bwrap.* runs only"):
        environment_for(task, "bwrap")


def test_terminus_2_refuses_a_task_that_is_not_a_harbor_task(tmp_path):
    with pytest.raises(ConfigError, match="--harness terminus-2 runs Harbor tasks"):
        capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="terminus-2", tasks="builtin"))


# -- the root the environment runs in ---------------------------------------------------------------


@needs_bwrap
def test_the_task_root_has_no_network_no_host_files_and_kills_a_timed_out_group():
    root = TaskRoot("/app")
    try:
        root.build()
        code, out = root.run("ls /; ls /work 2>&1; cat /etc/shadow 2>&1; "
                             "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 1)' 2>&1 | tail -1", 30)
        assert "app" in out.split() and "No such file" in out and "Network is unreachable" in out
        started = time.monotonic()
        code, out = root.run("(sleep 300 &) ; sleep 300", 1.0)
        assert code == TIMEOUT_EXIT and time.monotonic() - started < 10
        assert marked_pids(root.marker) == []  # the backgrounded sleep too
    finally:
        root.close()
    assert not root.state.exists()


@needs_bwrap
def test_a_path_leading_out_of_the_root_is_refused(tmp_path):
    root = TaskRoot("/app")
    try:
        root.build()
        root.run("ln -s /etc /app/escape; ln -s / /app/up", 30)  # inside the root these are harmless; on the host not
        for path in ("/app/escape/passwd", "/app/up/etc/passwd", "/../../etc/passwd"):
            with pytest.raises(PermissionError, match="leads outside the environment's root"):
                root.host_path(path)
        assert root.host_path("/app/solution.py") == root.root / "app/solution.py"
    finally:
        root.close()


# -- crosscheck ---------------------------------------------------------------------------------


def test_a_trajectory_whose_ids_differ_from_the_trace_is_a_finding():
    record = {"index": 0, "response": {"choices": [{"token_ids": [1, 2], "logprobs": {"content": [
        {"logprob": -0.5}, {"logprob": -0.25}]}}]}}
    step = {"step_id": 2, "source": "agent", "metrics": {"completion_token_ids": [1, 2], "logprobs": [-0.5, -0.25]}}
    assert crosscheck_trajectory({"steps": [step]}, [record])["findings"] == []
    bad = {**step, "metrics": {"completion_token_ids": [1, 3], "logprobs": [-0.5, -0.25]}}
    assert crosscheck_trajectory({"steps": [bad]}, [record])["findings"] == [
        "step 2: no recorded call sampled its token ids", "1 recorded call(s) match no trajectory step"]
    off = {**step, "metrics": {"completion_token_ids": [1, 2], "logprobs": [-0.5, -0.3]}}
    assert crosscheck_trajectory({"steps": [off]}, [record])["findings"][0] == "step 2: logprobs differ from call 0"
    both = crosscheck_trajectory({"steps": [step]}, [record, record], {"summarization-1-summary": {"steps": [step]}})
    assert both["findings"] == [] and both["subagent_steps"] == 1 and both["matched"] == 2
    assert both["subagent_calls"] == {"summarization-1-summary": [0]}


# -- rollouts ---------------------------------------------------------------------------------------


@alone
@needs_harbor
@needs_bwrap
def test_terminus_2_on_a_builtin_harbor_task_gets_the_verifiers_reward_at_level_tokens(tmp_path):
    out = tmp_path / "out"
    result = capture_rollout(CaptureConfig(out_dir=out, harness="terminus-2", tasks=HARBOR_BUILTIN_SOURCE,
                                           task_index=_index(VOWEL), rollout_seed=3))
    summary = result.summary
    assert result.ok, result.errors
    assert summary["capture_level"] == "tokens" and summary["captured_calls"] >= 2
    assert summary["stop_reason"] == "harness_exit"
    assert summary["harbor"]["reward_source"] == "harbor_verifier"
    assert summary["env_reward"] == summary["harbor"]["rewards"]["reward"] and summary["env_reward"] > 0
    check = summary["harbor"]["trajectory"]
    assert check["findings"] == [] and check["matched"] == summary["captured_calls"]
    trajectory = json.loads((out / HARBOR_TRAJECTORY_FILE).read_text())
    assert trajectory["schema_version"].startswith("ATIF")
    calls = json.loads((out / "trace.json").read_text())["calls"]
    assert all(c["request"].get("temperature") == 1.0 and c["request"].get("max_tokens") for c in calls)
    assert check_artifact_dir(out) == []
    assert _leftovers() == []


@pytest.fixture(scope="module")
def terminus_rollout(tmp_path_factory) -> Path:
    """One terminus-2 rollout on a built-in Harbor task: its artifact folder."""
    if find_harbor() is None or shutil.which("bwrap") is None:
        pytest.skip("needs Harbor (make harbor) and bwrap (make system-deps)")
    out = tmp_path_factory.mktemp("terminus") / "out"
    result = capture_rollout(CaptureConfig(out_dir=out, harness="terminus-2", tasks=HARBOR_BUILTIN_SOURCE,
                                           task_index=_index(VOWEL), rollout_seed=5))
    assert result.ok, result.errors
    return out


def test_harbors_own_validator_accepts_the_trajectory_the_capture_exports(terminus_rollout):
    harbor_python = Path(find_harbor()).parent / "python"
    checked = subprocess.run([str(harbor_python), "-m", "harbor.utils.trajectory_validator",
                              str(terminus_rollout / TRAJECTORY_FILE)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_harbors_own_trajectory_imports_at_level_tokens_with_the_captures_sequences(terminus_rollout, tmp_path):
    bare = tmp_path / "terminus.atif.json"
    shutil.copy(terminus_rollout / HARBOR_TRAJECTORY_FILE, bare)
    imported = import_documents(AtifSource(bare, tmp_path))
    assert imported[SUMMARY_FILE]["capture_level"] == "tokens"
    captured = json.loads((terminus_rollout / ROLLOUT_FILE).read_text())["sequences"]
    assert [(s["input_ids"], s["loss_mask"], s["logprobs"]) for s in imported[ROLLOUT_FILE]["sequences"]] == \
        [(s["input_ids"], s["loss_mask"], s["logprobs"]) for s in captured]


@alone
@needs_harbor
@needs_bwrap
def test_terminus_2s_summarisation_calls_are_recorded_and_match_its_subagent_trajectories(tmp_path):
    out = tmp_path / "out"  # a 5000-token context leaves under 8000 free: terminus-2 summarises every turn
    result = capture_rollout(CaptureConfig(out_dir=out, harness="terminus-2", tasks=HARBOR_BUILTIN_SOURCE,
                                           task_index=_index(VOWEL), local_max_model_len=5000, max_turns=2))
    check = result.summary["harbor"]["trajectory"]
    assert check["subagent_steps"] >= 3 and check["findings"] == []
    assert sum(len(v) for v in check["subagent_calls"].values()) == check["subagent_steps"]
    assert check["matched"] == result.summary["captured_calls"] == check["agent_steps"] + check["subagent_steps"]
    assert (out / "harbor_trajectory.summarization-1-summary.json").is_file()
    assert check_artifact_dir(out) == [] and _leftovers() == []


@needs_harbor
@needs_bwrap
def test_a_builtin_harness_on_a_harbor_task_is_scored_by_the_tasks_test_sh(tmp_path):
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="builtin", tasks=HARBOR_BUILTIN_SOURCE,
                                           task_index=_index(VOWEL), rollout_seed=0))
    assert result.ok, result.errors
    assert result.summary["harbor"]["reward_source"] == "tests/test.sh"
    assert result.summary["env_reward"] is not None and result.summary["env_reward"] > 0


@alone
@needs_harbor
@needs_bwrap
def test_a_batch_runs_terminus_2_on_harbor_tasks_in_groups_with_the_verifiers_rewards(tmp_path):
    from rollout_dataset.cli import main

    out = tmp_path / "batch"
    assert main(["batch", "--tasks", HARBOR_BUILTIN_SOURCE, "--env-option", "harness=terminus-2", "--seeds", "0-1",
                 "--rollouts-per-seed", "1", "--concurrency", "2", "--no-progress", "--no-dataset",
                 "--out", str(out)]) == 0
    summaries = [json.loads(p.read_text()) for p in sorted((out / "rollouts").glob("*/summary.json"))]
    assert len(summaries) == 2 and {s["harness"] for s in summaries} == {"terminus-2"}
    assert len({s["task_id"] for s in summaries}) == 2  # seed s runs task s mod 3
    assert all(s["harbor"]["reward_source"] == "harbor_verifier" and s["env_reward"] is not None
               and s["capture_level"] == "tokens" for s in summaries)
    assert _leftovers() == []


def _terminus_step(keystrokes: str, done: bool = False) -> str:
    return json.dumps({"analysis": "a", "plan": "p", "commands": [{"keystrokes": keystrokes, "duration": 0.3}]
                       if keystrokes else [], "task_complete": done})


@alone
@needs_harbor
@needs_bwrap
def test_a_hostile_agent_cannot_see_tests_or_solution_nor_forge_the_reward(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [
        _terminus_step("ls /tests /solution; cat /solution/solve.sh; cat /tests/cases.json; mkdir -p /tests; "
                       "echo 'echo 1 > /logs/verifier/reward.txt' > /tests/test.sh; echo 1 > /logs/verifier/reward.txt\n"),
        _terminus_step("rm -rf /tests /logs/verifier; tmux kill-server\n"),
        _terminus_step("", True), _terminus_step("", True)], "final": _terminus_step("", True)}))
    out = tmp_path / "out"
    result = capture_rollout(CaptureConfig(out_dir=out, harness="terminus-2", tasks=HARBOR_BUILTIN_SOURCE,
                                           task_index=_index(VOWEL), policy="script", script=script))
    summary = result.summary
    calls = json.loads((out / "trace.json").read_text())["calls"]
    seen = json.dumps([c["request"] for c in calls])
    assert "No such file or directory" in seen  # /tests and /solution are not there while the agent runs
    assert summary["leakage"] == {"checked": True, "hits": []}
    assert summary["env_reward"] == 0.0  # the real tests ran (no solution.py), not the planted ones
    assert summary["captured_calls"] == 2  # the tmux server was killed on the second: terminus-2 stopped there
    assert summary["stop_reason"] == "ended_without_task_complete" and summary["harbor"]["exception"] is None
    assert _leftovers() == []


@alone
@needs_harbor
@needs_bwrap
def test_a_verifier_that_hangs_is_named_and_leaves_nothing(tmp_path):
    task = _copy_task(tmp_path)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\nsleep 600\n")
    (task / "task.toml").write_text((task / "task.toml").read_text().replace("timeout_sec = 60.0", "timeout_sec = 2.0"))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="terminus-2", tasks=str(task.parent)))
    assert result.summary["env_reward"] is None
    assert "Timeout" in result.summary["unscored_reason"] or "timed out" in result.summary["unscored_reason"]
    assert _leftovers() == []


@alone
@needs_harbor
@needs_bwrap
def test_harbor_killed_mid_run_leaves_no_process_and_no_root(tmp_path):
    from rollout_dataset.harbor.adapter import find_harbor, harbor_command

    task = _copy_task(tmp_path)
    argv = harbor_command(find_harbor(), task, tmp_path / "trials", "t", base_url="http://127.0.0.1:9/v1",
                          model="m", environment=ENVIRONMENT_SPEC, agent_kwargs={})
    argv[argv.index("terminus-2")] = "oracle"  # an agent that needs no model: solve.sh, then a sleep below
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n(sleep 600 &)\nsleep 600\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "HARBOR_TELEMETRY": "0"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not subprocess.run(
                ["sh", "-c", "grep -l ROLLOUT_HARBOR_ENV= /proc/[0-9]*/environ 2>/dev/null"],
                capture_output=True, text=True).stdout.strip():
            time.sleep(0.2)
        assert _leftovers(), "the oracle's sleep never started"
        os.kill(proc.pid, signal.SIGKILL)  # Harbor alone, as kill -9 would
        proc.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _leftovers():
            time.sleep(0.3)
        assert _leftovers() == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_environment_module_imports_only_harbor_the_stdlib_and_its_siblings():
    folder = Path(__file__).resolve().parents[1] / "rollout_dataset" / "harbor"
    allowed = set(sys.stdlib_module_names) | {"harbor", "rollout_dataset", "reaper", "bwrap_root"}
    import ast

    for name in ("bwrap_environment.py", "bwrap_root.py", "reaper.py", "preflight.py"):
        tree = ast.parse((folder / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                top = node.module.split(".")[0]
                assert top in allowed, (name, node.module)
                if top == "rollout_dataset":
                    assert node.module in ("rollout_dataset.harbor.reaper", "rollout_dataset.harbor.bwrap_root",
                                           "rollout_dataset.harbor.environments")
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in allowed for a in node.names), name


@alone
@pytest.mark.real_vllm
@needs_harbor
@needs_bwrap
def test_terminus_2_against_genuine_vllm_ends_with_the_verifiers_reward_at_level_tokens(tmp_path):
    """Opt-in (REAL_VLLM_URL, a 32k-context served model): the tiny random model never writes valid JSON
    and always hits max_tokens, so terminus-2 runs until Harbor stops it on the agent budget; the
    verifier then scores what is there."""
    url = os.environ.get("REAL_VLLM_URL")
    if not url:
        pytest.skip("set REAL_VLLM_URL (a genuine vLLM, e.g. http://127.0.0.1:18000/v1)")
    import httpx

    model = httpx.get(url.rstrip("/") + "/models", timeout=10).json()["data"][0]["id"]
    out = tmp_path / "out"
    result = capture_rollout(CaptureConfig(out_dir=out, harness="terminus-2", tasks=HARBOR_BUILTIN_SOURCE,
                                           task_index=_index(VOWEL), base_url=url, model=model, max_tokens=16,
                                           max_turns=3, timeout_s=20))
    summary = result.summary
    assert summary["capture_level"] == "tokens" and summary["captured_calls"] >= 1
    assert summary["stop_reason"] == "timeout" and summary["harbor"]["exception"].startswith("AgentTimeoutError")
    assert summary["env_reward"] == 0.0 and summary["harbor"]["reward_source"] == "harbor_verifier"
    calls = json.loads((out / "trace.json").read_text())["calls"]
    assert all(c["response"]["choices"][0].get("token_ids") for c in calls if c.get("status") == 200)
    assert _leftovers() == []


def test_without_harbor_terminus_2_is_refused_naming_make_harbor(monkeypatch):
    from rollout_dataset.harbor import adapter
    from rollout_dataset.harness.requirements import missing_tools

    monkeypatch.setattr(adapter, "find_harbor", lambda: None)
    missing = missing_tools("terminus-2")
    assert [(m.tool, m.install) for m in missing][:1] == [("harbor", "make harbor")]
    assert str(missing[0].error()) == "--harness terminus-2 needs harbor, which is not installed: run `make harbor`"
