"""`capture --env crafter` honours PUSH_TO_DATASET like a coding capture: built into a dataset and pushed
(to the loopback Hub fixture), the token never on disk; the library pushes only to an explicit push_repo."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hub_fixture import FakeHub
from rollout_dataset.recipes.crafter import CrafterRolloutConfig, run_crafter_rollout

TOKEN = "hf_crafterTokenNeverOnDisk12345"
EPISODE = ["--seed", "2", "--max-steps", "8", "--max-turns", "3", "--area", "32,32"]


def _hub_env(hub: FakeHub, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), HF_TOKEN=TOKEN, PUSH_TO_DATASET="org/crafter",
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    return env


def test_capture_env_crafter_pushes_the_rollout_when_push_to_dataset_is_set(tmp_path):
    out = tmp_path / "art"
    with FakeHub(token=TOKEN) as hub:
        proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "capture", "--env", "crafter", *EPISODE,
                               "--out-dir", str(out)], env=_hub_env(hub, tmp_path), capture_output=True, text=True,
                              timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _, files = hub.repos["org/crafter"].head()
    assert "README.md" in files and any(p.startswith("data/summary/") for p in files)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == "crafter" and not summary["errors"]
    assert TOKEN not in proc.stdout + proc.stderr
    assert not [p for p in out.rglob("*") if p.is_file() and TOKEN in p.read_text(errors="replace")]


def test_capture_env_crafter_no_push_skips_the_push_even_with_push_to_dataset_set(tmp_path):
    out = tmp_path / "art"
    with FakeHub(token=TOKEN) as hub:
        proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "capture", "--env", "crafter", *EPISODE,
                               "--no-push", "--out-dir", str(out)], env=_hub_env(hub, tmp_path),
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "org/crafter" not in hub.repos
    assert (out / "summary.json").exists()


def test_a_failed_crafter_push_is_an_error_of_the_capture_and_the_artifacts_stay(tmp_path):
    result = run_crafter_rollout(CrafterRolloutConfig(out_dir=tmp_path / "art", seed=2, max_steps=8, max_turns=3,
                                                      area=(32, 32), push_repo="not a repo id"))
    assert [e["kind"] for e in result.errors] == ["push_error"] and result.exit_code == 1
    assert "not a repo id" in result.errors[0]["message"]
    assert result.validation_failures == [] and (tmp_path / "art" / "summary.json").is_file()


def test_the_library_does_not_read_push_to_dataset_without_a_push_repo(tmp_path, monkeypatch):
    monkeypatch.setenv("PUSH_TO_DATASET", "not a repo id")
    result = run_crafter_rollout(CrafterRolloutConfig(out_dir=tmp_path / "art", seed=2, max_steps=8, max_turns=3,
                                                      area=(32, 32)))
    assert result.ok and result.errors == []
