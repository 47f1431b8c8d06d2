"""Harbor's installed agents inside a Podman container, every call through the recording proxy at level
`tokens` (`--harness harbor:NAME`), and a hostile agent in the container.

Each rollout builds a tiny image and runs Harbor's trial in it: one to two minutes on two loaded cores,
so they are opt-in (``ROLLOUT_HARBOR_AGENT_TESTS=1``, `make test-harbor-agents`). They need Podman with
podman-compose (`make containers`), the stand-in image `TINY_IMAGE` (`make standin-images`), Harbor
(`make harbor`) and, per agent, its npm binary (`make npm-tools`) or, for mini-swe-agent, its folder for
the container's Python (prepared from PyPI on first use).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.harbor.adapter import find_harbor
from rollout_dataset.harbor.installed import INSTALLED_AGENTS, agent_binary, relay_tools_missing
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.schema.check import check_artifact_dir

#: the stand-in base image the test task builds FROM (tiny Debian, no Python)
TINY_IMAGE = "localhost/rollout-dataset/tiny:bookworm"
#: the stand-in with python3 (Debian bookworm's 3.11), for mini-swe-agent
PYTHON_IMAGE = "docker.io/library/python:3.12-slim"


def _image_exists(name: str) -> bool:
    return shutil.which("podman") is not None and subprocess.run(
        ["podman", "image", "exists", name], capture_output=True, timeout=600).returncode == 0


def _why_not() -> str | None:
    if os.environ.get("ROLLOUT_HARBOR_AGENT_TESTS") != "1":
        return "opt-in: ROLLOUT_HARBOR_AGENT_TESTS=1 (each rollout builds an image and runs a container)"
    if find_harbor() is None:
        return "Harbor is not installed (make harbor)"
    if relay_tools_missing():
        return f"not installed: {', '.join(relay_tools_missing())} (make containers)"
    return None


pytestmark = [pytest.mark.harbor_agents, pytest.mark.skipif(_why_not() is not None, reason=_why_not() or ""),
              pytest.mark.timeout(2400)]  # an image build and waits on Podman's storage lock take minutes on a loaded host


def _task(tmp_path: Path, image: str = TINY_IMAGE, network: str = "no-network") -> Path:
    """A Harbor task: write the word hello to /app/hello.txt; its verifier checks it."""
    if not _image_exists(image):
        pytest.skip(f"the stand-in image {image} is not built (make standin-images)")
    task = tmp_path / "tasks" / "hello"
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "instruction.md").write_text("Create the file /app/hello.txt containing the word hello.\n")
    (task / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 300.0\n[verifier]\ntimeout_sec = 60.0\n'
                                    f'[environment]\nnetwork_mode = "{network}"\n')
    (task / "environment" / "Dockerfile").write_text(f"FROM {image}\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        'if [ "$(cat /app/hello.txt 2>/dev/null)" = "hello" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho hello > /app/hello.txt\n")
    return task


def _capture(tmp_path: Path, harness: str, steps: list, task: Path) -> tuple:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": steps, "final": "Done."}))
    out = tmp_path / "out"
    result = capture_rollout(CaptureConfig(out_dir=out, harness=harness, tasks=str(task.parent), policy="script",
                                           script=script, timeout_s=600))
    return result, out


def _containers_left(summary: dict) -> list[str]:
    """The containers of the rollout's Harbor trial still there (Harbor names its compose project after the trial)."""
    project = f"{summary['harbor']['trial']}__env"
    return subprocess.run(["podman", "ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}"],
                          capture_output=True, text=True, timeout=600).stdout.split()


WRITE = "echo hello > /app/hello.txt"
STEPS = {
    "opencode": [{"text": "Writing it.", "tool_calls": [{"name": "bash", "arguments": {"command": WRITE,
                                                                                         "description": "write"}}]}],
    "codex": [{"text": "", "tool_calls": [{"name": "exec_command", "arguments": {"cmd": WRITE}}]}],
    "claude-code": [{"text": "", "tool_calls": [{"name": "Bash", "arguments": {"command": WRITE,
                                                                                 "description": "write"}}]}],
    "mini-swe-agent": [{"name": "bash", "arguments": {"command": WRITE}},
                       {"name": "bash", "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}],
}


@pytest.mark.parametrize("name", ["opencode", "codex", "claude-code", "mini-swe-agent"])
def test_an_installed_agent_in_a_no_network_container_is_captured_at_level_tokens_with_the_verifiers_reward(
        tmp_path, name):
    agent = INSTALLED_AGENTS[name]
    if agent.binary is not None and agent_binary(agent) is None:
        pytest.skip(f"{agent.binary[0]} is not installed (make npm-tools)")
    task = _task(tmp_path, PYTHON_IMAGE if name == "mini-swe-agent" else TINY_IMAGE)
    result, out = _capture(tmp_path, f"harbor:{name}", STEPS[name], task)
    summary = result.summary
    assert result.ok, (result.errors, summary.get("harbor"))
    assert summary["env_reward"] == 1.0 and summary["harbor"]["reward_source"] == "harbor_verifier"
    assert summary["harbor"]["network"] == {"asked": "no-network", "given": "proxy-only"}
    assert summary["capture_level"] == "tokens" and summary["captured_calls"] >= 1
    calls = json.loads((out / "trace.json").read_text())["calls"]
    assert calls and all(c["capture_level"] == "tokens" for c in calls if c["status"] == 200)
    assert check_artifact_dir(out) == []
    assert _containers_left(summary) == []


class _HostService:
    """A TCP service on every host address (0.0.0.0): what a container could reach through its gateway."""

    SECRET = "host-service-secret-7f3a"

    def __init__(self) -> None:
        self.sock = socket.create_server(("0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            with conn:
                conn.sendall(self.SECRET.encode())

    def close(self) -> None:
        self.sock.close()


def test_a_hostile_agent_in_the_container_reaches_only_its_own_session_of_the_proxy(tmp_path, monkeypatch):
    if agent_binary(INSTALLED_AGENTS["opencode"]) is None:
        pytest.skip("opencode is not installed (make npm-tools)")
    from rollout_dataset.proxy import CaptureProxy

    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-host-secret-31c9")  # a host secret Harbor must not pass on
    service = _HostService()
    other_traces = tmp_path / "other-traces"
    other = CaptureProxy(upstream="http://127.0.0.1:9/v1", trace_dir=other_traces)  # another capture's proxy
    other.__enter__()
    try:
        probe = "; ".join([
            f"for h in 10.88.0.1 192.0.2.2 host.containers.internal; do (exec 3<>/dev/tcp/$h/{service.port} && "
            "head -c 64 <&3 && echo \" HOST-RE\"\"ACHED-$h\") 2>&1 | tail -1; done",
            f"(exec 3<>/dev/tcp/127.0.0.1/{other.port} && echo OTHER-PROXY-RE\"\"ACHED) 2>&1 | tail -1",
            "(exec 3<>/dev/tcp/1.1.1.1/80 && echo INTERNET-RE\"\"ACHED) 2>&1 | tail -1",
            "(exec 3<>/dev/tcp/pypi.org/443 && echo REGISTRY-RE\"\"ACHED) 2>&1 | tail -1",
            "env | grep -c tok-host-secret || true", "echo PROCS: $(cat /proc/[0-9]*/comm | sort -u)",
        ])
        steps = [{"text": "", "tool_calls": [{"name": "bash", "arguments": {"command": probe, "description": "p"}}]}]
        result, out = _capture(tmp_path, "harbor:opencode", steps, _task(tmp_path))
    finally:
        other.__exit__(None, None, None)
        service.close()
    calls = json.loads((out / "trace.json").read_text())["calls"]
    seen = json.dumps([c["request"] for c in calls])
    assert "Network is unreachable" in seen  # the probe ran and its output came back through the proxy
    for reached in ("HOST-REACHED", "OTHER-PROXY-REACHED", "INTERNET-REACHED", "REGISTRY-REACHED"):
        assert reached not in seen  # each marker is split in the command (RE""ACHED): only output would hold it
    assert service.hits == 0 and _HostService.SECRET not in seen
    assert "tok-host-secret-31c9" not in (out / "trace.json").read_text()
    assert "PROCS: " in seen and "socat" not in seen and "nsenter" not in seen  # the relay is the host's, unseen inside
    assert list(other_traces.glob("*.jsonl")) == []  # the other capture's proxy got nothing
    assert result.summary["harbor"]["network"]["given"] == "proxy-only"
    assert _containers_left(result.summary) == []


def test_containers_a_killed_trial_left_behind_are_removed_by_its_project():
    from rollout_dataset.harbor.trial_containers import remove_trial_containers

    if not _image_exists(TINY_IMAGE):
        pytest.skip(f"the stand-in image {TINY_IMAGE} is not built (make standin-images)")
    name = "rd-left-behind-test"
    created = subprocess.run(["podman", "create", "--label", f"com.docker.compose.project={name}__env", TINY_IMAGE,
                              "sleep", "600"], capture_output=True, text=True, timeout=600)
    assert created.returncode == 0, created.stderr
    assert len(remove_trial_containers("podman", name)) == 1
    assert _containers_left({"harbor": {"trial": name}}) == []
