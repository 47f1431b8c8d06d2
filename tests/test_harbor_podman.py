"""Image-backed Harbor tasks in real containers: Harbor's own ``podman`` environment, on the tiny image.

The task of tests/data/harbor_podman builds `FROM` the tiny Debian image (`make tiny-image`, seconds,
cached) with a RUN, a COPY, ENV and WORKDIR; Harbor builds it with podman-compose and runs it. Each test
needs Podman set up as docs/harbor.md says (`make containers tiny-image`, both in `make test-deps`) and
Harbor (`make harbor`); each checks that nothing of its trial is left in the engine. The runtime killed
under a trial is opt-in (`make test-containers`): a few minutes more on a loaded machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.harbor.adapter import find_harbor, run_terminus
from rollout_dataset.harbor.standin_images import STANDIN_TARGET, TINY_IMAGE
from rollout_dataset.harbor.trial_containers import compose_project, trial_container_names
from rollout_dataset.recipes.coding import CaptureConfig

TASKS = Path(__file__).resolve().parent / "data" / "harbor_podman"
TINY_TASK = TASKS / "tiny-upper"


def _podman_ready() -> str | None:
    """Why the tests cannot run here, or None."""
    if find_harbor() is None:
        return "Harbor is not installed (make harbor)"
    if shutil.which("podman") is None or shutil.which("podman-compose") is None:
        return "Podman or podman-compose is missing (make containers)"
    if subprocess.run(["podman", "image", "exists", TINY_IMAGE], capture_output=True).returncode != 0:
        return f"{TINY_IMAGE} is not built (make tiny-image)"
    return None


# builds and container starts wait on Podman's storage lock: generous room on a loaded machine
pytestmark = [pytest.mark.skipif(_podman_ready() is not None, reason=str(_podman_ready())), pytest.mark.timeout(1500)]


def _copy_tiny_task(tmp_path: Path, dockerfile: str | None = None, solve: str | None = None) -> Path:
    """The tiny task in a folder of its own (a task set of one), with another Dockerfile or solve.sh."""
    dest = tmp_path / "tasks" / "tiny-upper"
    shutil.copytree(TINY_TASK, dest)
    if dockerfile is not None:
        (dest / "environment" / "Dockerfile").write_text(dockerfile)
    if solve is not None:
        (dest / "solution" / "solve.sh").write_text(solve)
    return dest


def _assert_oracle_scores_1_and_leaves_no_container(task: Path, trials_dir: Path) -> None:
    """Runs Harbor's `oracle` agent on `task` under `--env podman`: reward 1.0, no container left."""
    trial = f"oracle-{secrets.token_hex(4)}"
    subprocess.run([find_harbor(), "trials", "start", "-p", str(task), "--agent", "oracle", "--env", "podman",
                    "--trials-dir", str(trials_dir), "--trial-name", trial],
                   capture_output=True, text=True, timeout=1800,
                   env={**os.environ, "HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    result = json.loads((trials_dir / trial / "result.json").read_text())
    assert (result.get("verifier_result") or {}).get("rewards", {}).get("reward") == 1.0, result.get("exception_info")
    assert trial_container_names("podman", trial) == []


def test_harbors_oracle_scores_the_image_backed_task_1_under_podman_and_leaves_no_container(tmp_path):
    _assert_oracle_scores_1_and_leaves_no_container(TINY_TASK, tmp_path)


def test_a_dockerfile_step_that_fails_is_named_with_its_last_output_and_the_rollout_unscored(tmp_path):
    # both lines on one stream: Podman reads a step's stdout and stderr through two pipes, so lines of
    # different streams can come in either order
    dockerfile = (f"FROM {TINY_IMAGE}\nRUN echo preparing\n"
                  "RUN echo 'compiling module' >&2 && echo 'fatal: missing header probe.h' >&2 && exit 3\nRUN echo never\n")
    _copy_tiny_task(tmp_path, dockerfile=dockerfile)
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="terminus-2", tasks=str(tmp_path / "tasks"),
                                           task_index=0))
    summary = result.summary
    assert summary["env_reward"] is None
    reason = summary["unscored_reason"]
    assert "image build failed at step 3/4" in reason and "exit 3" in reason, reason
    assert "compiling module | fatal: missing header probe.h" in reason, reason
    assert "Docker compose command failed" not in reason  # the line, not the compose frontend's dump


def test_a_base_image_no_registry_can_give_is_named_and_points_at_the_stand_ins(tmp_path):
    _copy_tiny_task(tmp_path, dockerfile="FROM python:3.12-slim-trixie\nRUN echo hi\n")
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="terminus-2", tasks=str(tmp_path / "tasks"),
                                           task_index=0))
    reason = result.summary["unscored_reason"]
    assert result.summary["env_reward"] is None
    assert "base image python:3.12-slim-trixie cannot be pulled: its registry is unreachable" in reason, reason
    assert "standin_images --list" in reason  # no stand-in has that name: which ones exist


def test_a_missing_stand_in_is_named_with_the_target_that_builds_it(tmp_path):
    image = "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624"
    if subprocess.run(["podman", "image", "exists", image], capture_output=True).returncode == 0:
        pytest.skip(f"{image} is built here (the message for a missing one cannot be provoked)")
    _copy_tiny_task(tmp_path, dockerfile=f"FROM {image}\nRUN echo hi\n")
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="terminus-2", tasks=str(tmp_path / "tasks"),
                                           task_index=0))
    assert f"`{STANDIN_TARGET}` builds a local stand-in tagged {image}" in result.summary["unscored_reason"]


JAVA_TASK = Path(__file__).resolve().parent / "data" / "harbor_java" / "java-sum"


@pytest.mark.containers_heavy
@pytest.mark.skipif(not os.environ.get("CONTAINERS_HEAVY"), reason="opt-in: make test-containers (CONTAINERS_HEAVY=1)")
def test_harbors_oracle_scores_a_java_task_1_on_the_eclipse_temurin_stand_in(tmp_path):
    # the verifier checks the program's output and that java/javac are the JDK under JAVA_HOME=/opt/java/openjdk
    if subprocess.run(["podman", "image", "exists", "docker.io/library/eclipse-temurin:17"], capture_output=True).returncode:
        pytest.skip(f"the eclipse-temurin:17 stand-in is not built ({STANDIN_TARGET})")
    _assert_oracle_scores_1_and_leaves_no_container(JAVA_TASK, tmp_path)


def _kill_runtime_when_running(trial_name: str, stop: threading.Event, killed: list[str]) -> None:
    """Once the trial's container runs, SIGKILL its conmon and its init: the container runtime dying under
    the rollout (Harbor is then starting or running the agent)."""
    label = f"label=com.docker.compose.project={compose_project(trial_name)}"
    while not stop.is_set():
        ids = subprocess.run(["podman", "ps", "-q", "--filter", label], capture_output=True, text=True).stdout.split()
        if ids:
            pids = subprocess.run(["podman", "inspect", "--format", "{{.State.ConmonPid}} {{.State.Pid}}", ids[0]],
                                  capture_output=True, text=True).stdout.split()
            subprocess.run(["kill", "-9", *pids], capture_output=True)
            killed.extend(pids)
            return
        stop.wait(0.5)


@pytest.mark.containers_heavy
@pytest.mark.skipif(not os.environ.get("CONTAINERS_HEAVY"), reason="opt-in: make test-containers (CONTAINERS_HEAVY=1)")
def test_a_container_runtime_that_dies_mid_rollout_leaves_nothing_running_and_the_rollout_unscored(tmp_path):
    task = _copy_tiny_task(tmp_path, solve="#!/bin/bash\nsleep 600\n")
    trial = f"trial-{secrets.token_hex(4)}"
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_runtime_when_running, args=(trial, stop, killed), daemon=True)
    killer.start()
    try:
        # a model name with a slash: terminus-2 calls it through LiteLLM's openai provider (no model_info needed)
        run = run_terminus(task, tmp_path / "trials", base_url="http://127.0.0.1:9/v1", model="test/m", api_key="k",
                           timeout_s=300, verifier_timeout_s=60, trial_name=trial)
    finally:
        stop.set()
        killer.join(timeout=30)
    assert killed, f"the trial's container never ran: {run.exception}"
    assert run.reward is None
    assert run.exception and "container stopped under the running trial" in run.exception, run.exception
    assert trial_container_names("podman", trial) == []


def test_terminus_2_on_the_image_backed_task_is_captured_at_level_tokens_with_its_verifiers_reward(tmp_path):
    out = tmp_path / "out"
    result = capture_rollout(CaptureConfig(out_dir=out, harness="terminus-2", tasks=str(TASKS), task_index=0,
                                           max_turns=4))
    summary = result.summary
    assert summary["harbor"]["environment"] == "podman" and summary["harbor"]["exception"] is None
    assert summary["capture_level"] == "tokens" and summary["captured_calls"] >= 1
    assert summary["harbor"]["reward_source"] == "harbor_verifier"
    assert summary["env_reward"] == summary["harbor"]["rewards"]["reward"]  # the local backend does not solve it: 0.0


def test_a_no_network_task_runs_under_podman_with_loopback_only_and_is_captured_with_its_verifiers_reward(tmp_path):
    # Harbor's own podman environment refuses no-network where its egress sidecar images cannot be pulled;
    # the task runs in this project's podman environment with network `none` instead (docs/harbor.md)
    task = _copy_tiny_task(tmp_path)
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(toml.replace("[environment]\n", '[environment]\nnetwork_mode = "no-network"\n'))
    # the verifier rewards the solved task only when the container has no network interface but loopback
    test_sh = (task / "tests" / "test.sh").read_text()
    (task / "tests" / "test.sh").write_text(test_sh.replace(
        'echo "$reward" >', '[ "$(ls /sys/class/net)" = lo ] || reward=0\necho "$reward" >'))
    command = {"keystrokes": "tr 'a-z' 'A-Z' < /app/data.txt > /app/out.txt\n", "duration": 0.5}
    script = tmp_path / "script.json"
    script.write_text(json.dumps({
        "steps": [json.dumps({"analysis": "a", "plan": "p", "commands": [command], "task_complete": False})],
        "final": json.dumps({"analysis": "done", "plan": "", "commands": [], "task_complete": True})}))
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="terminus-2", tasks=str(task.parent),
                                           task_index=0, policy="script", script=script, harbor_env="podman"))
    summary = result.summary
    assert summary["harbor"]["exception"] is None, summary["harbor"]
    assert summary["harbor"]["network"]["asked"] == "no-network"
    assert summary["env_reward"] == 1.0 and summary["harbor"]["reward_source"] == "harbor_verifier"
    assert summary["capture_level"] == "tokens" and summary["captured_calls"] >= 1
    assert trial_container_names("podman", summary["harbor"]["trial"]) == []
