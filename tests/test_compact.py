"""Compaction (rollout_dataset/builder/compaction.py, rollout_dataset/hub/remote_compaction.py): fewer shards, the same rows in the same order, every
rollout exactly once; locally atomic per config, on the Hub one commit that racing pushers survive
(loopback Hub, tests/hub_fixture.py)."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hub_fixture import FakeHub
from rollout_dataset.builder import CONFIG_NAMES, build
from support.synthetic_dataset import write_synthetic_dataset
from rollout_dataset.builder.compaction import compact_local, plan_merges

TOKEN = "hf_compactTokenNeverLeaks0123456789abcd"


def _append_builds(ds: Path, root: Path, builds: int, per_build: int = 1, seed: int = 0) -> None:
    """`builds` builds into the same folder: one new shard per config each."""
    for b in range(builds):
        arts = root / f"art-{seed}-{b}"
        write_synthetic_dataset(arts, per_build, seed=seed + b * per_build, n_turns=2, context_tokens=64)
        build([arts], ds, progress=False)


def _rows(ds: Path, config: str) -> list[dict]:
    return [r for s in sorted((ds / "data" / config).glob("*.parquet")) for r in pq.read_table(s).to_pylist()]


def _shards(ds: Path, config: str) -> int:
    return len(list((ds / "data" / config).glob("*.parquet")))


def test_plan_packs_consecutive_small_shards_up_to_the_target_and_leaves_big_ones_alone():
    assert plan_merges([10, 10, 10, 100, 5, 5], 25) == [[0, 1], [2], [3], [4, 5]]
    assert plan_merges([], 25) == []
    with pytest.raises(ValueError, match="target_bytes"):
        plan_merges([1], 0)


def test_local_compact_merges_many_shards_keeps_rows_and_order_and_load_dataset_reads_it(tmp_path):
    import datasets

    ds = tmp_path / "ds"
    _append_builds(ds, tmp_path, builds=6)
    before = {c: _rows(ds, c) for c in CONFIG_NAMES}
    assert _shards(ds, "summary") == 6
    result = compact_local(ds)
    for config in CONFIG_NAMES:
        assert _rows(ds, config) == before[config], config  # same rows, same order
        assert _shards(ds, config) == 1, config
    assert result.shards_before["summary"] == 6 and result.shards_after["summary"] == 1
    assert not (ds / ".compact-staging").exists()
    loaded = datasets.load_dataset(str(ds), "turns", split="train", cache_dir=str(tmp_path / "cache"))
    assert sorted(loaded["rollout_id"]) == sorted(r["rollout_id"] for r in before["turns"])
    assert "**6 rollouts**" in (ds / "README.md").read_text()


def test_local_compact_keeps_each_rollout_once_when_a_shard_is_duplicated(tmp_path):
    ds = tmp_path / "ds"
    _append_builds(ds, tmp_path, builds=3)
    before = {c: _rows(ds, c) for c in CONFIG_NAMES}
    for config in CONFIG_NAMES:  # a second copy of the first shard, sorting last
        first = sorted((ds / "data" / config).glob("*.parquet"))[0]
        shutil.copy(first, first.with_name("99991231T000000000000Z-dup.parquet"))
    result = compact_local(ds)
    for config in CONFIG_NAMES:
        assert _rows(ds, config) == before[config], config
    assert result.duplicate_rows["summary"] == 1


def test_local_compact_keeps_the_card_options_and_arrow_sizes(tmp_path):
    from rollout_dataset.builder.card import read_card_metadata

    ds = tmp_path / "ds"
    for b in range(3):
        arts = tmp_path / f"art-{b}"
        write_synthetic_dataset(arts, 1, seed=b, n_turns=2, context_tokens=64)
        build([arts], ds, progress=False, pretty_name="Kept title", language=("fr",),
              homepage="https://example.org/rollouts")
    before = read_card_metadata((ds / "README.md").read_text())
    compact_local(ds)
    text = (ds / "README.md").read_text()
    after = read_card_metadata(text)
    assert after["pretty_name"] == "Kept title" and after["language"] == ["fr"]
    assert "https://example.org/rollouts" in text
    sizes = {i["config_name"]: i["splits"][0]["num_bytes"] for i in after["dataset_info"]}
    assert sizes.keys() == {i["config_name"] for i in before["dataset_info"]}
    for config in CONFIG_NAMES:  # the Arrow size of the merged shard, as datasets computes it
        assert sizes[config] == sum(pq.read_table(p).nbytes for p in (ds / "data" / config).glob("*.parquet"))


def test_big_shards_stay_as_they_are(tmp_path):
    ds = tmp_path / "ds"
    _append_builds(ds, tmp_path, builds=3)
    names = sorted(p.name for p in (ds / "data" / "summary").glob("*.parquet"))
    result = compact_local(ds, target_bytes=1)
    assert not result.changed
    assert sorted(p.name for p in (ds / "data" / "summary").glob("*.parquet")) == names


def test_a_shard_written_during_compaction_stops_it_and_nothing_is_lost(tmp_path, monkeypatch):
    import rollout_dataset.builder.compaction as compact
    from rollout_dataset.errors import ArtifactError

    ds = tmp_path / "ds"
    _append_builds(ds, tmp_path, builds=2)
    late = tmp_path / "late"
    _append_builds(late, tmp_path, builds=1, seed=50)
    original = compact.merge_shards

    def merge_while_a_build_lands(config, sources, drops, dst):
        for shard in (late / "data" / config).glob("*.parquet"):
            shutil.copy(shard, ds / "data" / config / shard.name)
        return original(config, sources, drops, dst)

    monkeypatch.setattr(compact, "merge_shards", merge_while_a_build_lands)
    with pytest.raises(ArtifactError, match="changed while compacting"):
        compact_local(ds, configs=["summary"])
    assert _shards(ds, "summary") == 3 and len(_rows(ds, "summary")) == 3
    assert not (ds / ".compact-staging").exists()


_KILLED = """
import os, signal, sys
import rollout_dataset.builder.compaction as compact
original = compact._swap_in
calls = {"n": 0}
def swap_then_die(staged, live, old):
    calls["n"] += 1
    if calls["n"] == int(sys.argv[2]):
        if sys.argv[3] == "between":  # the fallback path (no renameat2), killed between its two renames
            old.parent.mkdir(parents=True, exist_ok=True)
            os.replace(live, old)
        os.kill(os.getpid(), signal.SIGKILL)
    return original(staged, live, old)
compact._swap_in = swap_then_die
compact.compact_local(sys.argv[1])
"""


@pytest.mark.parametrize("where", ["before", "between"])
def test_a_killed_compact_leaves_a_loadable_dataset_and_the_next_compact_finishes(tmp_path, where):
    ds = tmp_path / "ds"
    _append_builds(ds, tmp_path, builds=3)
    before = {c: sorted(r["rollout_id"] for r in _rows(ds, c)) for c in CONFIG_NAMES}
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(ds), "3", where], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert (ds / ".compact-staging").exists()  # killed mid-way: its staging is left behind
    if where == "before":  # every config folder in place, each old or new, each complete
        for config in CONFIG_NAMES:
            assert sorted(r["rollout_id"] for r in _rows(ds, config)) == before[config], config
    compact_local(ds)
    assert not (ds / ".compact-staging").exists()
    for config in CONFIG_NAMES:
        assert sorted(r["rollout_id"] for r in _rows(ds, config)) == before[config], config
        assert _shards(ds, config) == 1, config


# --- Hub -----------------------------------------------------------------------------------------

def _env(hub: FakeHub, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home), HF_TOKEN=TOKEN, HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1")
    return env


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "rollout_dataset.cli", *args], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return proc


def _hub_ids(hub: FakeHub, repo: str, config: str) -> list[str]:
    ids: list[str] = []
    for path, data in hub.files(repo).items():
        if path.startswith(f"data/{config}/") and path.endswith(".parquet"):
            ids += pq.read_table(io.BytesIO(data), columns=["rollout_id"]).column("rollout_id").to_pylist()
    return sorted(ids)


def _hub_shards(hub: FakeHub, repo: str, config: str) -> int:
    return sum(1 for p in hub.files(repo) if p.startswith(f"data/{config}/") and p.endswith(".parquet"))


def _datasets(root: Path, n: int, seed: int) -> list[Path]:
    out = []
    for i in range(n):
        arts = root / f"art-{seed}-{i}"
        write_synthetic_dataset(arts, 1, seed=seed + i, n_turns=2, context_tokens=64)
        build([arts], root / f"ds-{seed}-{i}", progress=False)
        out.append(root / f"ds-{seed}-{i}")
    return out


def _local_ids(datasets_: list[Path], config: str) -> list[str]:
    return sorted(r["rollout_id"] for d in datasets_ for r in _rows(d, config))


_LOAD = """
import json, sys, datasets
print(json.dumps(sorted(datasets.load_dataset(sys.argv[1], "turns", split="train")["rollout_id"])))
"""


def test_append_pushes_then_compact_repo_keeps_every_rollout_once_in_one_commit(tmp_path):
    parts = _datasets(tmp_path, 3, seed=10)
    with FakeHub(token=TOKEN) as hub:
        env = _env(hub, tmp_path / "home")
        for d in parts:
            _cli(["push", str(d), "--repo", "org/c", "--no-compact"], env)
        commits = len(hub.repos["org/c"].commits)
        assert _hub_shards(hub, "org/c", "summary") == 3
        out = _cli(["compact", "--repo", "org/c"], env).stdout
        assert "summary: 3 -> 1 shards" in out
        assert len(hub.repos["org/c"].commits) == commits + 1
        for config in CONFIG_NAMES:
            assert _hub_ids(hub, "org/c", config) == _local_ids(parts, config), config
            assert _hub_shards(hub, "org/c", config) == 1, config
        loaded = json.loads(subprocess.run([sys.executable, "-c", _LOAD, "org/c"], env=env, capture_output=True,
                                           text=True, timeout=240, check=True).stdout)
        assert "**3 rollouts**" in hub.files("org/c")["README.md"].decode()
    assert loaded == _local_ids(parts, "turns")


_AUTO = """
import sys
from rollout_dataset.hub import push
r = push(sys.argv[1], "org/auto", compact_above=2)
print("compacted" if r.compacted is not None and r.compacted.commit else "not compacted")
"""


def test_push_compacts_on_its_own_past_the_threshold(tmp_path):
    parts = _datasets(tmp_path, 3, seed=30)
    with FakeHub(token=TOKEN) as hub:
        env = _env(hub, tmp_path / "home")
        outs = [subprocess.run([sys.executable, "-c", _AUTO, str(d)], env=env, capture_output=True, text=True,
                               timeout=240, check=True).stdout.strip() for d in parts]
        assert outs == ["not compacted", "not compacted", "compacted"]
        for config in CONFIG_NAMES:
            assert _hub_ids(hub, "org/auto", config) == _local_ids(parts, config), config
        assert _hub_shards(hub, "org/auto", "summary") == 1


_RACED = """
import subprocess, sys
from huggingface_hub import HfApi
from rollout_dataset.hub import compact_repo
original = HfApi.create_commit
calls = {"n": 0}
def raced(self, repo_id, operations, **kw):
    calls["n"] += 1
    if calls["n"] == 1:  # two pushers, racing each other, land between this compaction's read and its commit
        procs = [subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "push", d, "--repo", repo_id,
                                   "--no-compact"], stdout=subprocess.DEVNULL) for d in sys.argv[1:]]
        assert [p.wait() for p in procs] == [0, 0]
    return original(self, repo_id, operations, **kw)
HfApi.create_commit = raced
result = compact_repo("org/race")
print(result.attempts, result.shards_after["summary"])
"""


def test_a_compaction_racing_two_pushers_keeps_every_rollout_once(tmp_path):
    one, two = _datasets(tmp_path, 1, seed=100), _datasets(tmp_path, 1, seed=200)
    first = _datasets(tmp_path, 2, seed=300)
    with FakeHub(token=TOKEN) as hub:
        env = _env(hub, tmp_path / "home")
        for d in first:  # two shards per config: work for the compaction
            _cli(["push", str(d), "--repo", "org/race", "--no-compact"], env)
        proc = subprocess.run([sys.executable, "-c", _RACED, str(one[0]), str(two[0])], env=env,
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        # its first commit was refused (the repo moved); the retry merged all four pushes' shards
        assert proc.stdout.split() == ["2", "1"]
        assert hub.commit_conflicts >= 1
        for config in CONFIG_NAMES:
            assert _hub_ids(hub, "org/race", config) == _local_ids(one + two + first, config), config
        assert "**4 rollouts**" in hub.files("org/race")["README.md"].decode()


def test_a_full_disk_while_compacting_names_the_config_and_leaves_its_rows_as_they_were(tmp_path, monkeypatch, capsys):
    import errno

    from rollout_dataset.builder.writer import ConfigWriter
    from rollout_dataset.cli import main

    ds = tmp_path / "ds"
    _append_builds(ds, tmp_path, builds=3)
    before = {c: _rows(ds, c) for c in CONFIG_NAMES}
    real_flush = ConfigWriter.flush

    def full_disk(self):  # the write seam of every shard: ENOSPC as pyarrow raises it for a full disk
        if self.config == "sequences":
            raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")
        real_flush(self)

    monkeypatch.setattr(ConfigWriter, "flush", full_disk)
    assert main(["compact", str(ds)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {ds / 'data' / 'sequences'}: ") and "No space left" in err[0]
    for config in CONFIG_NAMES:
        assert sorted(r["rollout_id"] for r in _rows(ds, config)) == sorted(r["rollout_id"] for r in before[config])
    assert _shards(ds, "sequences") == 3 and not (ds / ".compact-staging").exists()


def test_compact_refuses_a_folder_that_is_not_a_rollout_dataset_and_changes_nothing(tmp_path, capsys):
    from rollout_dataset.cli import main

    ds = tmp_path / "ds"
    _append_builds(ds, tmp_path, builds=2)
    (ds / "README.md").write_text("# my own notes\n")  # no card with the rollout-dataset tag
    before = {str(p.relative_to(ds)): p.read_bytes() for p in ds.rglob("*") if p.is_file()}
    assert main(["compact", str(ds)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith(f"error: {ds}: not a rollout-dataset dataset")
    assert {str(p.relative_to(ds)): p.read_bytes() for p in ds.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("size", ["1e999", "inf", "nan", "0.5", "0.0001KB"])
def test_a_target_size_that_is_not_a_whole_positive_byte_count_is_a_usage_error(tmp_path, capsys, size):
    from rollout_dataset.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["compact", str(tmp_path), "--target-size", size])
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and err[-1].startswith("rollout-dataset compact: error: argument --target-size: ")
