"""The streaming build: parts in worker processes give the same dataset, row for row; row groups and
shards are bounded; a failed or killed worker names its folder and leaves `--out` as it was."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from rollout_dataset.builder import CONFIG_NAMES, build
from rollout_dataset.builder.parts import PartStopped, build_part, plan_inputs, read_progress, split_parts
from support.synthetic_dataset import write_synthetic_rollout
from rollout_dataset.errors import ArtifactError, SchemaValidationError


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("workers") / "in"
    for i in range(8):
        write_synthetic_rollout(root / f"r{i}", seed=i, n_turns=3, context_tokens=256, with_retry=True,
                                task_index=i % 3)
    return root


def _config_tables(out: Path) -> dict:
    """Every config as `load_dataset` reads it: its shards in name order, concatenated."""
    return {c: pq.read_table(sorted((out / "data" / c).glob("*.parquet"))) for c in CONFIG_NAMES}


def _card_without_sizes(out: Path) -> str:
    """The card without its byte counts (shard files differ in number, so do their sizes)."""
    lines = (out / "README.md").read_text().splitlines()
    return "\n".join(line for line in lines if not any(k in line for k in ("num_bytes", "download_size", "dataset_size")))


def test_two_workers_give_the_dataset_of_one_row_for_row(inputs, tmp_path):
    one = build([inputs], tmp_path / "one", progress=False, workers=1)
    two = build([inputs], tmp_path / "two", progress=False, workers=2)
    assert one.added == two.added and one.rows == two.rows and two.total_rollouts == 8
    a, b = _config_tables(tmp_path / "one"), _config_tables(tmp_path / "two")
    for config in CONFIG_NAMES:
        assert a[config].to_pylist() == b[config].to_pylist(), config
    assert len(list((tmp_path / "two" / "data" / "sequences").glob("*.parquet"))) == 2  # one shard per part
    assert _card_without_sizes(tmp_path / "one") == _card_without_sizes(tmp_path / "two")
    sessions = sorted(p.name for p in (tmp_path / "two" / "traces" / "sessions").iterdir())
    assert sessions == sorted(p.name for p in (tmp_path / "one" / "traces" / "sessions").iterdir())


def test_tiny_row_groups_and_shards_keep_every_row_in_order(inputs, tmp_path):
    whole = build([inputs], tmp_path / "whole", progress=False)
    small = build([inputs], tmp_path / "small", progress=False, row_group_bytes=1, shard_bytes=1)
    shards = sorted((tmp_path / "small" / "data" / "sequences").glob("*.parquet"))
    assert len(shards) > 1  # rolled past shard_bytes
    first = pq.ParquetFile(shards[0])
    assert all(first.metadata.row_group(i).num_rows >= 1 for i in range(first.num_row_groups))
    whole_groups = sum(pq.ParquetFile(s).num_row_groups for s in (tmp_path / "whole" / "data" / "trace").glob("*.parquet"))
    small_groups = sum(pq.ParquetFile(s).num_row_groups for s in (tmp_path / "small" / "data" / "trace").glob("*.parquet"))
    assert whole_groups == 1 and small_groups == 8  # one row group per rollout when each add overflows
    assert small.rows == whole.rows
    a, b = _config_tables(tmp_path / "whole"), _config_tables(tmp_path / "small")
    for config in CONFIG_NAMES:
        assert a[config].to_pylist() == b[config].to_pylist(), config


def _broken_copy(inputs: Path, dst: Path, index: int) -> Path:
    shutil.copytree(inputs, dst)
    bad = dst / f"r{index}"
    summary = json.loads((bad / "summary.json").read_text())
    summary["agent_turns"] = "many"
    (bad / "summary.json").write_text(json.dumps(summary))
    return bad


def test_a_failing_worker_names_its_folder_and_leaves_no_out(inputs, tmp_path):
    bad = _broken_copy(inputs, tmp_path / "in", 6)  # in the second part
    with pytest.raises(SchemaValidationError) as err:
        build([tmp_path / "in"], tmp_path / "out", progress=False, workers=2)
    assert str(bad / "summary.json") in str(err.value)
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob("out.*"))  # no staging folder left


def test_a_failure_in_the_part_this_process_builds_is_named_and_leaves_no_worker_behind(inputs, tmp_path):
    bad = _broken_copy(inputs, tmp_path / "in", 1)  # in the first part, built by the calling process
    with pytest.raises(SchemaValidationError) as err:
        build([tmp_path / "in"], tmp_path / "out", progress=False, workers=2)
    assert str(bad / "summary.json") in str(err.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.*"))
    assert not [c for c in psutil.Process().children(recursive=True) if "spawn_main" in " ".join(c.cmdline())]


def test_a_part_told_to_stop_stops_before_its_next_folder(inputs, tmp_path):
    spec = split_parts(sorted(inputs.iterdir()), *plan_inputs(sorted(inputs.iterdir()), set()), 1)[0]
    asked: list[int] = []
    with pytest.raises(PartStopped, match="stopped before"):
        build_part(spec, tmp_path, "p", stop=lambda: asked.append(1) or len(asked) > 2)
    assert len(asked) == 3  # two folders built, the third never started


def test_a_killed_worker_names_the_folder_it_was_on(inputs, tmp_path, monkeypatch):
    earlier = build([inputs / "r0"], tmp_path / "out", progress=False)
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    many = tmp_path / "many"
    for i in range(24):
        write_synthetic_rollout(many / f"m{i:02d}", seed=100 + i, n_turns=8, context_tokens=2048)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the build keeps its parts' progress files
    killed: list[int] = []

    def kill_the_worker_once_it_builds():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            marks = [read_progress(p) for p in tmp_path.glob("rollout-dataset-build-*/1.at")]
            if marks and marks[0] is not None and marks[0][1] >= 1:  # part 1's process is on its second folder
                psutil.Process(marks[0][0]).kill()
                killed.append(marks[0][0])
            time.sleep(0.005)

    killer = threading.Thread(target=kill_the_worker_once_it_builds)
    killer.start()
    try:
        with pytest.raises(ArtifactError) as err:
            build([many], tmp_path / "out", progress=False, workers=2)
    finally:
        killer.join()
    assert killed
    message = str(err.value)
    assert "worker process died" in message and any(f"pid {pid}, killed by signal 9" in message for pid in killed)
    dead_folder = message.split("while building ")[1].split(" (part")[0]
    assert Path(dead_folder).parent == many
    after = {p.name: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert after == before and earlier.total_rollouts == 1
    assert not list(tmp_path.glob("out.*"))


def test_the_cli_passes_workers_and_refuses_zero(inputs, tmp_path, capsys, monkeypatch):
    from rollout_dataset import builder
    from rollout_dataset.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["build", str(inputs), "--out", str(tmp_path / "zero"), "--workers", "0", "--no-progress"])
    assert exit_.value.code == 2 and "--workers: 0 is below 1" in capsys.readouterr().err
    seen = {}
    real = builder.build
    monkeypatch.setattr(builder, "build", lambda *a, **kw: seen.update(kw) or real(*a, **dict(kw, workers=1)))
    assert main(["build", str(inputs / "r0"), "--out", str(tmp_path / "two"), "--workers", "2", "--no-progress"]) == 0
    assert seen["workers"] == 2


def test_a_worker_whose_build_process_was_killed_stops_instead_of_writing_on(tmp_path):
    many = tmp_path / "many"
    for i in range(24):
        write_synthetic_rollout(many / f"m{i:02d}", seed=300 + i, n_turns=8, context_tokens=2048)
    script = ("import sys\nfrom rollout_dataset.builder import build\n"
              "build([sys.argv[1]], sys.argv[2], progress=False, workers=2)\n")
    builder = subprocess.Popen([sys.executable, "-c", script, str(many), str(tmp_path / "out")])
    sessions = tmp_path / f"out.staging-{builder.pid}" / "traces" / "sessions"
    deadline = time.monotonic() + 120
    workers: list[psutil.Process] = []
    while time.monotonic() < deadline and not (workers and sessions.is_dir() and len(list(sessions.iterdir())) > 2):
        workers = [c for c in psutil.Process(builder.pid).children(recursive=True)
                   if "spawn_main" in " ".join(c.cmdline())]
        time.sleep(0.01)
    assert workers, "the build never started its worker"
    builder.kill()
    builder.wait()
    _, alive = psutil.wait_procs(workers, timeout=60)
    for process in alive:
        process.kill()
    assert not alive, "a worker kept building after its build process was killed"
    assert len(list(sessions.iterdir())) < 24  # it stopped early rather than finishing its part
