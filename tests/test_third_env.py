"""A third environment from outside the package (`tests/third_env/parrot_env`), registered only through
the entry-point group `rollout_dataset.environments`, is captured, batched and built like coding and Crafter.

Nothing is installed and no registry is patched: the commands run in a subprocess whose PYTHONPATH
holds `tests/third_env`, where importlib.metadata discovers `parrot_env-0.1.0.dist-info/entry_points.txt`
(and a broken plugin's, `broken_env-0.1.0.dist-info`) exactly as it would an installed distribution's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout_dataset.schema.check import validate_path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_DIR = Path(__file__).resolve().parent / "third_env"


def _cli(*argv: str, plugins: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    path = [str(ROOT)] + ([str(PLUGIN_DIR)] if plugins else [])
    env = {k: v for k, v in os.environ.items() if k not in ("PUSH_TO_DATASET", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join(path)
    return subprocess.run([sys.executable, "-m", "rollout_dataset.cli", *argv], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def parrot_capture(tmp_path_factory):
    out = tmp_path_factory.mktemp("parrot") / "rollout"
    proc = _cli("capture", "--env", "parrot", "--seed", "3", "--out-dir", str(out))
    return proc, out


def test_the_plugin_is_at_most_150_lines():
    assert len((PLUGIN_DIR / "parrot_env" / "__init__.py").read_text(encoding="utf-8").splitlines()) <= 150


def test_capture_env_parrot_writes_a_valid_artifact_folder_through_the_one_pipeline(parrot_capture):
    proc, out = parrot_capture
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validate_path(out) == []
    summary = json.loads((out / "summary.json").read_text())
    task = json.loads((out / "task.json").read_text())
    assert summary["env"] == task["env"] == "parrot" and summary["task_id"] == "parrot-lantern"
    assert summary["harness"] == "parrot-agent" and summary["captured_calls"] == summary["agent_turns"] == 2
    assert summary["capture_level"] == "tokens" and summary["env_reward"] == 0.5  # echo repeats the word once
    trace = json.loads((out / "trace.json").read_text())
    assert trace["seal"]["records"] == 2 and "lantern" in trace["calls"][0]["request"]["messages"][0]["content"]


def test_the_plugin_adds_its_own_capture_flag_which_reaches_its_config(tmp_path):
    out = tmp_path / "rollout"
    proc = _cli("capture", "--env", "parrot", "--word", "quartz", "--out-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["task_id"] == "parrot-quartz"


def test_the_plugin_flag_is_listed_in_its_own_group_and_refused_with_another_env(tmp_path):
    assert "--env parrot options" in _cli("capture", "-h").stdout
    proc = _cli("capture", "--word", "quartz", "--out-dir", str(tmp_path / "x"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == "error: --word only applies to --env parrot"


def test_a_captured_parrot_rollout_builds_into_a_dataset(parrot_capture, tmp_path):
    _, out = parrot_capture
    proc = _cli("build", str(out), "--out", str(tmp_path / "ds"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list((tmp_path / "ds" / "data" / "summary").glob("*.parquet"))


def test_batch_env_parrot_runs_scores_and_builds_like_the_others(tmp_path):
    out = tmp_path / "batch"
    proc = _cli("batch", "--env", "parrot", "--smoke", "--no-progress", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in (out / "rollouts").glob("*/batch_result.json")]
    assert len(results) == 2 and {r["task_id"] for r in results} == {"parrot-apple", "parrot-river"}
    # the echo policy repeats the word on the first of the agent's turns only
    assert all(r["num_steps"] >= 2 and r["final_return"] == pytest.approx(1 / r["num_steps"]) for r in results)
    assert list((out / "dataset" / "data" / "summary").glob("*.parquet"))


def test_a_broken_plugin_is_named_without_a_traceback_and_does_not_hide_the_others(tmp_path):
    proc = _cli("capture", "--env", "broken", "--out-dir", str(tmp_path / "x"), timeout=120)
    assert proc.returncode == 2
    assert "entry point 'broken'" in proc.stderr and "broken_env_module_that_does_not_exist" in proc.stderr
    assert "Traceback" not in proc.stderr
    listed = _cli("capture", "--env", "nope", "--out-dir", str(tmp_path / "y"), timeout=120)
    assert "known: broken, coding, crafter, parrot" in listed.stderr


def test_without_the_plugin_on_the_path_the_environment_is_unknown(tmp_path):
    proc = _cli("capture", "--env", "parrot", "--out-dir", str(tmp_path / "z"), plugins=False, timeout=120)
    assert proc.returncode == 2 and "unknown environment 'parrot'" in proc.stderr
