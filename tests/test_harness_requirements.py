"""A harness or sandbox tool that is not installed stops `capture`/`batch` before anything starts, naming the
command that installs it (`rollout_dataset.harness.requirements`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollout_dataset.cli import main
from rollout_dataset.errors import ToolNotInstalledError
from rollout_dataset import npm_tools
from rollout_dataset.harness import presets
from rollout_dataset.harness.requirements import missing_tools, require_harness_tools


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """A PATH holding only bash and coreutils-free stand-ins: no harness, no bwrap, no socat; no .npm-tools."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sh"):
        os.symlink(f"/bin/{tool}", bin_dir / tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    for variable in ("OPENCODE_BIN", "CODEX_BIN", "CLAUDE_CODE_BIN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(npm_tools, "_REPO_ROOT", tmp_path / "checkout")  # a checkout without .npm-tools
    monkeypatch.setattr(presets, "find_mini", lambda: "mini")  # not next to this Python either
    return bin_dir


def _tool(bin_dir: Path, name: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)


@pytest.mark.parametrize(("harness", "install"), [("opencode", "make npm-tools"), ("codex", "make npm-tools"),
                                                  ("claude-code", "make npm-tools"), ("mini-swe-agent", "pip install 'rollout-dataset[harnesses]'")])
def test_capture_without_the_harness_fails_at_once_naming_its_install_command(bare_path, tmp_path, capsys,
                                                                              harness, install):
    code = main(["capture", "--harness", harness, "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"error: --harness {harness} needs " in err and f"run `{install}`" in err, err
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


def test_a_missing_bubblewrap_is_named_with_make_system_deps(bare_path):
    with pytest.raises(ToolNotInstalledError, match=r"needs bwrap \(bubblewrap\), which is not installed: run "
                                                    r"`make system-deps`"):
        require_harness_tools("builtin")


def test_an_external_harness_needs_socat_where_the_sandbox_is_built(bare_path):
    _tool(bare_path, "bwrap")
    _tool(bare_path, "opencode")
    assert [(m.tool, m.install) for m in missing_tools("opencode")] == [("socat", "make system-deps")]
    _tool(bare_path, "socat")
    assert missing_tools("opencode") == []


def test_unsafe_sandbox_does_not_need_bubblewrap(bare_path):
    assert missing_tools("builtin", unsafe_sandbox=True) == []
    assert missing_tools("builtin") != []


def test_a_cmd_harness_whose_program_is_missing_is_named(bare_path):
    _tool(bare_path, "bwrap")
    _tool(bare_path, "socat")
    assert [m.tool for m in missing_tools('cmd:"my-agent --url {base_url}"')] == ["my-agent"]
    assert str(missing_tools('cmd:"my-agent --url {base_url}"')[0].error()) == (
        "--harness cmd: needs my-agent, which is not installed: install it, or give its absolute path in the command")
    _tool(bare_path, "my-agent")
    assert missing_tools('cmd:"my-agent --url {base_url}"') == []
    assert missing_tools('cmd:"cd {workdir} && anything"') == []  # shell syntax: left to the shell


def test_batch_without_bubblewrap_fails_before_any_rollout_naming_make_system_deps(bare_path, tmp_path, capsys):
    code = main(["batch", "--smoke", "--no-progress", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 2 and "run `make system-deps`" in err, err
    assert not (tmp_path / "b").exists()


def test_the_error_is_a_file_not_found_error_too():
    error = ToolNotInstalledError("opencode", "make npm-tools", "--harness opencode")
    assert isinstance(error, FileNotFoundError)
    assert str(error) == "--harness opencode needs opencode, which is not installed: run `make npm-tools`"


def test_a_harbor_installed_agent_names_podman_the_relay_and_its_binary_with_their_installs(bare_path):
    missing = {m.tool: m.install for m in missing_tools("harbor:opencode")}
    assert missing["podman"] == "make containers" and missing["socat"] == "make containers"
    assert missing["opencode"] == "make npm-tools"
    assert "opencode" not in {m.tool for m in missing_tools("harbor:mini-swe-agent")}  # prepared from PyPI instead
