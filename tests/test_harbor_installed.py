"""Harbor's installed agents inside the task's container (`--harness harbor:NAME`): the command Harbor gets
(connection, key, mounts, environment), the refusals, and what the environment and agent modules import.

The container runs are in tests/test_harbor_installed_podman.py (Podman; opt-in where slow).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from rollout_dataset.errors import ConfigError
from rollout_dataset.harbor.agent_paths import PYTHON_MARKER, WHEELS_TARGET
from rollout_dataset.harbor.installed import (AGENT_KEY_ENV, INSTALLED_AGENTS, PROXIED_PODMAN_SPEC, agent_binary,
                                              agent_mounts, installed_agent, installed_agent_command,
                                              prepare_mini_swe_agent)
from rollout_dataset.harness.presets import resolve_harness

SESSION_URL = "http://127.0.0.1:43210/sessions/r1/v1"


def _argv(name: str, **kw) -> list[str]:
    agent = INSTALLED_AGENTS[name]
    return installed_agent_command("harbor", Path("/tasks/t"), Path("/trials"), "trial", agent=agent,
                                   base_url=SESSION_URL, model="Qwen/Qwen3-8B", proxy_socket="/run/x/forward.sock",
                                   proxy_port=43210, mounts=kw.pop("mounts", []), **kw)


def _flag(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_every_installed_agent_gets_the_proxy_session_url_and_the_dummy_key_by_name_only():
    for name in INSTALLED_AGENTS:
        argv = _argv(name)
        assert _flag(argv, "--api-key-name") == [AGENT_KEY_ENV]
        assert not any("sk-" in a or "dummy" in a for a in argv)  # the key itself is never on the command line
        assert _flag(argv, "--env") == [PROXIED_PODMAN_SPEC]
        assert _flag(argv, "--environment-kwarg") == ["proxy_socket=/run/x/forward.sock", "proxy_port=43210"]
        assert _flag(argv, "--base-url")[0].startswith("http://127.0.0.1:43210/sessions/r1")


def test_each_agent_speaks_the_api_the_proxy_records_for_it():
    formats = {name: _flag(_argv(name), "--api-format")[0] for name in INSTALLED_AGENTS}
    assert formats == {"opencode": "openai_chat_completions", "codex": "openai_responses",
                       "claude-code": "anthropic_messages", "mini-swe-agent": "openai_chat_completions"}


def test_claude_code_gets_the_session_root_because_it_appends_v1_messages_itself():
    assert _flag(_argv("claude-code"), "--base-url") == ["http://127.0.0.1:43210/sessions/r1"]
    assert _flag(_argv("opencode"), "--base-url") == [SESSION_URL]


def test_opencode_uses_a_provider_of_its_own_so_the_openai_responses_client_is_never_chosen():
    # opencode's built-in `openai` provider calls the Responses API whatever npm package is named
    assert _flag(_argv("opencode"), "--model") == ["rollout/Qwen/Qwen3-8B"]


def test_npm_agents_run_the_mounted_binary_without_installing_and_mini_swe_agent_installs_from_the_mount():
    for name in ("opencode", "codex", "claude-code"):
        argv = _argv(name)
        assert "skip_install=true" in _flag(argv, "--agent-kwarg")
        assert _flag(argv, "--agent") == [name]
    argv = _argv("mini-swe-agent")
    assert _flag(argv, "--agent") == ["rollout_dataset.harbor.offline_agents:OfflineMiniSweAgent"]
    assert "skip_install=true" not in _flag(argv, "--agent-kwarg")


def test_the_agent_binary_is_mounted_read_only_where_harbor_runs_it(tmp_path, monkeypatch):
    binary = tmp_path / "opencode"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("OPENCODE_BIN", str(binary))
    mounts = agent_mounts(INSTALLED_AGENTS["opencode"])
    assert mounts == [{"type": "bind", "source": str(binary), "target": "/usr/local/bin/opencode", "read_only": True}]
    argv = _argv("opencode", mounts=mounts)
    assert json.loads(_flag(argv, "--mounts")[0]) == mounts


def test_mini_swe_agents_folder_is_mounted_read_only_at_the_path_its_install_reads(tmp_path):
    mounts = agent_mounts(INSTALLED_AGENTS["mini-swe-agent"], str(tmp_path))
    assert mounts == [{"type": "bind", "source": str(tmp_path), "target": WHEELS_TARGET, "read_only": True}]


def test_a_missing_agent_binary_is_named_with_the_command_that_installs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEX_BIN", str(tmp_path / "absent"))
    monkeypatch.setattr("rollout_dataset.npm_tools._REPO_ROOT", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert agent_binary(INSTALLED_AGENTS["codex"]) is None
    with pytest.raises(FileNotFoundError, match="codex is not installed \\(make npm-tools\\)"):
        agent_mounts(INSTALLED_AGENTS["codex"])


def test_an_unknown_harbor_agent_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match="unknown Harbor agent 'aider'.*harbor:opencode"):
        installed_agent("harbor:aider")
    with pytest.raises(ValueError, match="harbor:codex"):
        resolve_harness("harbor:nope")
    assert installed_agent("opencode") is None
    assert resolve_harness("harbor:opencode").name == "harbor:opencode"


def test_a_batch_accepts_a_harbor_agent_and_names_an_unknown_one(tmp_path, monkeypatch):
    from rollout_dataset.batch.config import BatchConfig
    from rollout_dataset.recipes.coding.env import CodingEnvironment

    monkeypatch.setattr("rollout_dataset.sandbox.isolation.require_isolation", lambda unsafe: "allow-list")
    env = CodingEnvironment()
    config = BatchConfig(out_dir=tmp_path / "b", seeds=[0], env_options={"harness": "harbor:mini-swe-agent"})
    assert env.batch_options(config) == {"harness": "harbor:mini-swe-agent", "harbor_env": "auto"}
    with pytest.raises(ConfigError, match="unknown Harbor agent 'x'"):
        env.batch_options(BatchConfig(out_dir=tmp_path / "c", seeds=[0], env_options={"harness": "harbor:x"}))


def test_a_harbor_agent_on_a_task_that_is_not_a_harbor_task_is_refused(tmp_path):
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.recipes.coding import CaptureConfig

    with pytest.raises(ConfigError, match="--harness harbor:opencode runs Harbor tasks"):
        capture_rollout(CaptureConfig(out_dir=tmp_path / "out", harness="harbor:opencode", tasks="builtin"))


def test_the_prepared_mini_swe_agent_folder_is_reused_once_it_names_its_python(tmp_path):
    ready = tmp_path / "mini-swe-agent-py3.11"
    ready.mkdir()
    (ready / PYTHON_MARKER).write_text("3.11")
    assert prepare_mini_swe_agent("3.11", cache=tmp_path) == ready  # no pip run: it is there


def test_modules_that_run_inside_harbor_import_only_harbor_the_stdlib_and_agent_paths():
    folder = Path(__file__).resolve().parents[1] / "rollout_dataset" / "harbor"
    allowed = set(sys.stdlib_module_names) | {"harbor"}
    for name in ("proxied_podman.py", "offline_agents.py", "agent_paths.py"):
        for node in ast.walk(ast.parse((folder / name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                top = node.module.split(".")[0]
                assert top in allowed or node.module == "rollout_dataset.harbor.agent_paths", (name, node.module)
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in allowed for a in node.names), name


def test_codex_mounts_its_static_binary_not_the_node_launcher_npm_links(tmp_path, monkeypatch):
    tree = tmp_path / "node_modules"
    launcher = tree / "@openai" / "codex" / "bin" / "codex.js"
    native = tree / "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
    for path, text in ((launcher, "#!/usr/bin/env node\n"), (native, "\x7fELF")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    monkeypatch.setenv("CODEX_BIN", str(launcher))
    assert agent_binary(INSTALLED_AGENTS["codex"]) == str(native)  # the container has no node
    native.unlink()
    assert agent_binary(INSTALLED_AGENTS["codex"]) is None
