"""`make demo`, the main job: oracle captures on the local backend, the dataset built and every config
loaded back; a rerun replaces only folders the demo made."""

from __future__ import annotations

import datasets
import pytest

from rollout_dataset import demo
from rollout_dataset.builder import CONFIG_NAMES


def test_the_demo_captures_builds_and_loads_every_config(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PUSH_TO_DATASET", raising=False)
    artifacts, dataset = tmp_path / "artifacts", tmp_path / "dataset"
    assert demo.main(["--out", str(artifacts), "--dataset", str(dataset), "--n", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("| submit |") == 2
    assert all(f"{name}=" in out for name in CONFIG_NAMES) and "summary=2," in out
    assert "rollout-dataset push" in out  # says how to publish
    assert (dataset / "README.md").is_file()


def test_a_demo_rerun_replaces_its_own_folders_only(tmp_path, monkeypatch):
    monkeypatch.delenv("PUSH_TO_DATASET", raising=False)
    artifacts, dataset = tmp_path / "artifacts", tmp_path / "dataset"
    args = ["--out", str(artifacts), "--dataset", str(dataset), "--n", "1"]
    assert demo.main(args) == 0
    assert demo.main(args) == 0
    # replaced, not accumulated: one rollout folder, one rollout in the dataset
    assert len([p for p in artifacts.iterdir() if p.is_dir()]) == 1
    assert datasets.load_dataset(str(dataset), "summary", split="train").num_rows == 1
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not made by the demo"):
        demo.main(["--out", str(mine), "--dataset", str(dataset), "--n", "1"])
    assert (mine / "notes.txt").read_text() == "keep me"
