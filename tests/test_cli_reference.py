"""docs/cli.md is the CLI reference generated from the argparse parsers, and stays in step with them."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout_dataset.cli import COMMANDS
from rollout_dataset.cli.reference import REGENERATE_COMMAND, command_parsers, option_strings, render_reference

REPO = Path(__file__).resolve().parents[1]
CLI_MD = REPO / "docs" / "cli.md"
STALE = f"docs/cli.md is out of date with the CLI's parsers: run `{REGENERATE_COMMAND}` and commit docs/cli.md"


@pytest.fixture(scope="module")
def reference() -> str:
    assert CLI_MD.is_file(), f"docs/cli.md is missing: run `{REGENERATE_COMMAND}`"
    return CLI_MD.read_text(encoding="utf-8")


def test_every_command_has_a_section_in_the_reference(reference):
    missing = [name for name in COMMANDS if f"## `rollout-dataset {name}`" not in reference]
    assert not missing, f"commands missing from docs/cli.md: {missing}; {STALE}"


def test_every_flag_of_every_command_is_in_the_reference(reference):
    missing = [f"{name} {flag}" for name, parser in command_parsers().items()
               for flag in option_strings(parser) if f"`{flag}`" not in reference]
    assert not missing, f"flags missing from docs/cli.md: {missing}; {STALE}"


def test_the_reference_is_what_the_generator_writes(reference):
    assert reference == render_reference(), STALE


def test_the_reference_does_not_depend_on_the_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    narrow = render_reference()
    monkeypatch.setenv("COLUMNS", "250")
    assert render_reference() == narrow


def test_the_reference_states_the_exit_code_contract(reference):
    assert "| `0` | done |" in reference and "| `2` | usage:" in reference and "`error: ...`" in reference


def test_a_flag_added_without_regenerating_is_reported(monkeypatch, reference):
    from rollout_dataset.cli import validate_cmd

    original = validate_cmd.add_arguments

    def with_new_flag(parser: argparse.ArgumentParser) -> None:
        original(parser)
        parser.add_argument("--a-flag-nobody-documented", action="store_true", help="new")

    monkeypatch.setattr(validate_cmd, "add_arguments", with_new_flag)
    flags = option_strings(command_parsers()["validate"])
    assert "--a-flag-nobody-documented" in flags and "`--a-flag-nobody-documented`" not in reference
    assert render_reference() != reference


def test_the_generator_writes_the_file_it_is_given(tmp_path):
    out = tmp_path / "cli.md"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "rollout_dataset.cli.reference", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8") == render_reference() and not done.stdout
