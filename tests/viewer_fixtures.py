"""Fixtures of the viewer tests: demo rollouts captured and built once per session, hostile copies."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture(scope="session")
def demo_folders(tmp_path_factory) -> tuple[Path, Path]:
    """(artifact root, dataset folder): three oracle rollouts on the local backend, and their build."""
    from rollout_dataset.builder import build
    from rollout_dataset.demo import capture_demo_rollouts

    root = tmp_path_factory.mktemp("viewer-demo")
    dirs = capture_demo_rollouts(root / "artifacts", task_indices=(0, 1, 2))
    build(dirs, root / "dataset", progress=False)
    return root / "artifacts", root / "dataset"


@pytest.fixture(scope="session")
def hostile_tree(demo_folders, tmp_path_factory) -> Path:
    """A copy of the demo artifacts where the model's answer and the task id hold HTML/script, one folder
    with a corrupt rollout.json, one with a symlinked-out summary, and a symlink to a folder outside."""
    root = tmp_path_factory.mktemp("viewer-hostile") / "tree"
    shutil.copytree(demo_folders[0], root)
    first = root / "rollout-000"
    trace = json.loads((first / "trace.json").read_text())
    for call in trace["calls"]:
        message = call["response"]["choices"][0]["message"]
        message["content"] = HOSTILE + (message.get("content") or "")
    from rollout_dataset.trace_integrity import reseal

    (first / "trace.json").write_text(json.dumps(reseal(trace)))
    summary = json.loads((first / "summary.json").read_text())
    summary["stop_reason"] = HOSTILE
    (first / "summary.json").write_text(json.dumps(summary))
    (root / "rollout-001" / "rollout.json").write_text('{"schema_version": 1, "calls": [', encoding="utf-8")
    outside = tmp_path_factory.mktemp("viewer-outside")
    (outside / "secret.txt").write_text("SECRET-OUTSIDE-PATH")
    shutil.copytree(demo_folders[0] / "rollout-002", outside / "rollout-x")
    (root / "linked").symlink_to(outside / "rollout-x", target_is_directory=True)
    (root / "secret-link.txt").symlink_to(outside / "secret.txt")
    return root
