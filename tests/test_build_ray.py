"""`build --executor ray` (`builder.distributed.build_on_ray`) on a local Ray instance (2 CPUs, no
dashboard): each task builds a part, the driver merges them into the dataset a local build writes,
row for row; publishing it is one Hub commit (loopback Hub, tests/hub_fixture.py)."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray", reason="Ray is the optional extra rollout-dataset[ray]")

from checkpoint_support import pausing_child, signal_when_paused  # noqa: E402
from hub_fixture import FakeHub  # noqa: E402
from rollout_dataset.builder import CONFIG_NAMES, build  # noqa: E402
from rollout_dataset.builder.distributed import build_on_ray, plan_parts  # noqa: E402
from support.synthetic_dataset import write_synthetic_dataset  # noqa: E402
from rollout_dataset.errors import SchemaValidationError  # noqa: E402

TOKEN = "hf_ZZdistinctiveTokenNeverLeaks0123456789"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-build")
    write_synthetic_dataset(root / "arts", 5, seed=7, n_turns=2, context_tokens=64)
    return root


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().get_node_id()
    ray.shutdown()


def _rows(out: Path, config: str) -> list[dict]:
    """Every row of a config, shards in name order (the order `load_dataset` reads them)."""
    return [r for s in sorted((out / "data" / config).glob("*.parquet")) for r in pq.read_table(s).to_pylist()]


# first, before this module's own Ray instance starts (the CLI starts and stops its own)
def test_the_cli_builds_on_ray_and_publishes_in_one_commit(folders, tmp_path):
    with FakeHub(token=TOKEN) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE", "RAY_"))}
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "home"), HF_TOKEN=TOKEN, PUSH_TO_DATASET="org/ray",
                   HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
        proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", "build", str(folders / "arts"), "--out",
                               str(tmp_path / "ds"), "--executor", "ray", "--parts", "2", "--no-progress"],
                              env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        assert "5 rollouts (5 added, 0 already there)" in proc.stdout
        commits = hub.repos["org/ray"].commits
        assert len(commits) == 2  # the repo's creation, then ONE commit with every shard and the card
        files = hub.files("org/ray")
        for config in CONFIG_NAMES:
            hub_ids = sorted(r for p, data in files.items() if p.startswith(f"data/{config}/")
                             for r in pq.read_table(io.BytesIO(data), columns=["rollout_id"])["rollout_id"].to_pylist())
            assert hub_ids == sorted(r["rollout_id"] for r in _rows(tmp_path / "ds", config)), config
        assert "**5 rollouts**" in files["README.md"].decode()


_CHILD = pausing_child("""
    from rollout_dataset.builder.distributed import build_on_ray

    pause_at("part", 1, rounds=100)  # the first part has landed in the staging folder
    build_on_ray([sys.argv[1]], sys.argv[2], parts=2)
""")


def test_a_ray_build_stopped_by_sigterm_leaves_the_dataset_as_it_was_and_no_staging(folders, tmp_path):
    arts = sorted((folders / "arts").iterdir())
    build([arts[0]], tmp_path / "ds", progress=False)
    before = {str(p): p.read_bytes() for p in (tmp_path / "ds").rglob("*") if p.is_file()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    code = signal_when_paused(_CHILD, [str(folders / "arts"), str(tmp_path / "ds")], signal.SIGTERM, env=env,
                              timeout=60)
    assert code == 143
    assert {str(p): p.read_bytes() for p in (tmp_path / "ds").rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_plan_splits_the_folders_in_order_into_contiguous_parts(folders):
    plan = plan_parts([folders / "arts"], 2)
    assert [len(p.paths) for p in plan] == [3, 2]
    assert [f for p in plan for f in p.paths] == sorted(str(f) for f in (folders / "arts").iterdir())


def test_a_ray_build_equals_the_local_build_row_for_row(folders, tmp_path, local_ray):
    local = build([folders / "arts"], tmp_path / "local", progress=False)
    result = build_on_ray([folders / "arts"], tmp_path / "ray", parts=2)
    assert result.added == local.added and result.total_rollouts == 5
    for config in CONFIG_NAMES:
        assert _rows(tmp_path / "ray", config) == _rows(tmp_path / "local", config), config
        assert len(list((tmp_path / "ray" / "data" / config).glob("*.parquet"))) == 2  # one shard per part
    assert sorted(p.name for p in (tmp_path / "ray" / "traces" / "sessions").iterdir()) == \
        sorted(p.name for p in (tmp_path / "local" / "traces" / "sessions").iterdir())
    assert (tmp_path / "ray" / "tokenizer" / "tokenizer.json").read_bytes() == \
        (tmp_path / "local" / "tokenizer" / "tokenizer.json").read_bytes()
    assert "**5 rollouts**" in (tmp_path / "ray" / "README.md").read_text()
    listing = {str(p): p.stat().st_mtime_ns for p in (tmp_path / "ray").rglob("*")}
    again = build_on_ray([folders / "arts"], tmp_path / "ray", parts=2)  # a rerun: nothing built, nothing touched
    assert again.added == [] and sorted(again.skipped) == sorted(local.added)
    assert {str(p): p.stat().st_mtime_ns for p in (tmp_path / "ray").rglob("*")} == listing


def test_parts_pinned_to_a_node_that_overlap_keep_each_rollout_once(folders, tmp_path, local_ray):
    arts = sorted((folders / "arts").iterdir())
    node_dirs = {local_ray: [str(a) for a in arts[:3]]}
    result = build_on_ray([str(a) for a in arts[2:]], tmp_path / "ds", parts=1, node_dirs=node_dirs)
    assert result.total_rollouts == 5 and len(result.skipped) == 1  # arts[2] was in two parts
    for config in CONFIG_NAMES:
        ids = [r["rollout_id"] for r in _rows(tmp_path / "ds", config)]
        local = [r["rollout_id"] for r in _rows_of_local(folders, tmp_path, config)]
        assert sorted(ids) == sorted(local), config


def _rows_of_local(folders: Path, tmp_path: Path, config: str) -> list[dict]:
    out = tmp_path / "local-ref"
    if not out.exists():
        build([folders / "arts"], out, progress=False)
    return _rows(out, config)


def test_a_failed_part_leaves_the_dataset_folder_as_it_was(folders, tmp_path, local_ray):
    bad = tmp_path / "bad"
    shutil.copytree(folders / "arts", bad)
    victim = sorted(bad.iterdir())[-1]
    (victim / "turns.json").write_text("{not json")
    build([sorted(bad.iterdir())[0]], tmp_path / "ds", progress=False)
    before = {str(p.relative_to(tmp_path / "ds")): p.read_bytes() for p in (tmp_path / "ds").rglob("*") if p.is_file()}
    with pytest.raises(SchemaValidationError, match="turns.json"):
        build_on_ray([bad], tmp_path / "ds", parts=2)
    after = {str(p.relative_to(tmp_path / "ds")): p.read_bytes() for p in (tmp_path / "ds").rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "ds"]  # no staging folder left
