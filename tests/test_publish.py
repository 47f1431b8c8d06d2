"""Append-safe publishing, round-tripped through the loopback Hub (tests/hub_fixture.py).

huggingface_hub and datasets run in subprocesses with HF_ENDPOINT set before they are imported,
exactly as a user's process would; the fixture stores what they commit.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hub_fixture import FakeHub
from rollout_dataset.builder import CONFIG_NAMES, build
from support.synthetic_dataset import write_synthetic_dataset, write_synthetic_rollout
from rollout_dataset.cli.push_env import maybe_push_from_env

TOKEN = "hf_ZZdistinctiveTokenNeverLeaks0123456789"

_LOAD_ALL = """
import json, sys, datasets
from rollout_dataset.builder import CONFIG_NAMES, features
out = {}
for c in CONFIG_NAMES:
    ds = datasets.load_dataset(sys.argv[1], c, split="train")
    out[c] = {"ids": sorted(ds["rollout_id"]), "features_ok": ds.features == features(c)}
out["default_columns"] = datasets.load_dataset(sys.argv[1], split="train").column_names
print(json.dumps(out))
"""


def _env(hub: FakeHub, home: Path, token: str = TOKEN, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home), HF_TOKEN=token, HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1", **extra)
    return env


def _py(args: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=240)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def _push(dataset: Path, repo: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    return _py(["-m", "rollout_dataset.cli", "-v", "push", str(dataset), "--repo", repo], env, check)


def _local_ids(dataset: Path, config: str) -> list[str]:
    ids: list[str] = []
    for shard in (dataset / "data" / config).glob("*.parquet"):
        ids.extend(pq.read_table(shard, columns=["rollout_id"]).column("rollout_id").to_pylist())
    return sorted(ids)


def _dataset(root: Path, n: int, seed: int) -> Path:
    write_synthetic_dataset(root / "artifacts", n, seed=seed, n_turns=3, context_tokens=200)
    build([root / "artifacts"], root / "ds", progress=False)
    return root / "ds"


def _assert_token_nowhere(token: str, runs: list[subprocess.CompletedProcess], root: Path, blobs: list[bytes]) -> None:
    for run in runs:  # pushes run with -v: debug logging of huggingface_hub and ours
        assert token not in run.stdout and token not in run.stderr
    for path in root.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    assert not any(token.encode() in b for b in blobs)


def test_push_twice_appends_without_duplicates_and_load_returns_exactly_the_union(tmp_path):
    first = _dataset(tmp_path / "a", 2, seed=0)
    second = tmp_path / "b"
    shutil.copytree(first, second)
    write_synthetic_rollout(tmp_path / "extra", seed=50, n_turns=2, context_tokens=150, with_tests=False)
    build([tmp_path / "extra"], second, progress=False)
    with FakeHub(token=TOKEN) as hub:
        env = _env(hub, tmp_path / "home")
        runs = [_push(first, "org/rollouts", env)]
        files_after_first = set(hub.files("org/rollouts"))
        runs.append(_push(second, "org/rollouts", env))
        assert "1 rollouts added, 2 already there, 3 in total" in runs[-1].stdout
        runs.append(_push(second, "org/rollouts", env))
        assert "nothing new" in runs[-1].stdout
        files = hub.files("org/rollouts")
        assert files_after_first <= set(files)  # nothing deleted
        assert "**3 rollouts**" in files["README.md"].decode()
        runs.append(_py(["-c", _LOAD_ALL, "org/rollouts"], env))
        loaded = json.loads(runs[-1].stdout)
        blobs = hub.stored_bytes()
    _assert_token_nowhere(TOKEN, runs, tmp_path, blobs)
    for config in CONFIG_NAMES:
        assert loaded[config]["ids"] == _local_ids(second, config), config
        assert loaded[config]["features_ok"], config
    assert loaded["default_columns"][0] == "rollout_id" and "env_reward" in loaded["default_columns"]


def test_two_processes_pushing_at_once_both_land(tmp_path):
    one = _dataset(tmp_path / "one", 2, seed=100)
    two = _dataset(tmp_path / "two", 2, seed=200)
    with FakeHub(token=TOKEN) as hub:
        env = _env(hub, tmp_path / "home")
        procs = [subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "push", str(d), "--repo", "org/both"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for d in (one, two)]
        outputs = [p.communicate(timeout=240) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs
        loaded = json.loads(_py(["-c", _LOAD_ALL, "org/both"], env).stdout)
        readme = hub.files("org/both")["README.md"].decode()
    for config in CONFIG_NAMES:
        assert loaded[config]["ids"] == sorted(_local_ids(one, config) + _local_ids(two, config)), config
    assert "**4 rollouts**" in readme


_STALE = """
import sys
from huggingface_hub import HfApi
import rollout_dataset
original = HfApi.create_commit
state = {"n": 0}
def racing(self, repo_id, operations, **kw):
    state["n"] += repo_id == "org/race"  # the companion org/race-traces commits first, unraced
    if state["n"] == 1:  # another writer lands a commit between our read and our commit
        self.upload_file(path_or_fileobj=b"other writer", path_in_repo="notes.txt", repo_id=repo_id,
                         repo_type="dataset")
    return original(self, repo_id, operations, **kw)
HfApi.create_commit = racing
result = rollout_dataset.push(sys.argv[1], "org/race")
print(result.attempts, len(result.added))
"""


def test_a_stale_parent_commit_is_retried_with_fresh_state(tmp_path):
    ds = _dataset(tmp_path / "a", 2, seed=300)
    with FakeHub(token=TOKEN) as hub:
        out = _py(["-c", _STALE, str(ds)], _env(hub, tmp_path / "home")).stdout.split()
        files = hub.files("org/race")
        assert hub.commit_conflicts == 1
    assert out == ["2", "2"]
    assert "notes.txt" in files and "**2 rollouts**" in files["README.md"].decode()


def test_a_refused_token_gives_the_status_and_never_the_token(tmp_path):
    ds = _dataset(tmp_path / "a", 1, seed=500)
    wrong = "hf_WRONGdistinctiveTokenAlsoSecret9876543"
    with FakeHub(token=TOKEN) as hub:
        refused = _push(ds, "org/secret", _env(hub, tmp_path / "home", token=wrong), check=False)
        blobs = hub.stored_bytes()
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr and "org/secret" in refused.stderr
    _assert_token_nowhere(wrong, [refused], tmp_path, blobs)


def test_build_pushes_when_push_to_dataset_is_set_and_push_private_makes_it_private(tmp_path):
    write_synthetic_dataset(tmp_path / "artifacts", 1, seed=600, n_turns=2, context_tokens=100)
    with FakeHub(token=TOKEN) as hub:
        env = _env(hub, tmp_path / "home", PUSH_TO_DATASET="org/private", PUSH_PRIVATE="1")
        out = _py(["-m", "rollout_dataset.cli", "build", str(tmp_path / "artifacts"), "--out",
                   str(tmp_path / "ds"), "--no-progress"], env).stdout
        assert "pushed to" in out
        assert hub.repos["org/private"].private is True
        assert "README.md" in hub.files("org/private")


def test_maybe_push_from_env_does_nothing_without_push_to_dataset(tmp_path, monkeypatch):
    monkeypatch.delenv("PUSH_TO_DATASET", raising=False)
    assert maybe_push_from_env(tmp_path) is None


def test_a_bad_repo_id_is_refused_before_any_request(tmp_path):
    from rollout_dataset.hub import push

    with pytest.raises(ValueError, match="org/name"):
        push(tmp_path, "no-slash")


_PLANT = """
import sys
from huggingface_hub import HfApi
HfApi().upload_file(path_or_fileobj=b"PAR1 not parquet", path_in_repo=sys.argv[2], repo_id=sys.argv[1],
                    repo_type="dataset")
"""


@pytest.mark.parametrize("command", ["push", "compact"])
def test_an_unreadable_shard_in_the_repo_fails_in_one_line_naming_the_repo_and_the_file(tmp_path, command):
    first, second = _dataset(tmp_path / "a", 1, seed=600), _dataset(tmp_path / "b", 1, seed=610)
    with FakeHub(token=TOKEN) as hub:
        env = _env(hub, tmp_path / "home")
        _push(first, "org/bad", env)
        _py(["-c", _PLANT, "org/bad", "data/summary/zz-planted.parquet"], env)
        commits = len(hub.repos["org/bad"].commits)
        args = ["push", str(second), "--repo", "org/bad"] if command == "push" else ["compact", "--repo", "org/bad"]
        failed = _py(["-m", "rollout_dataset.cli", *args], env, check=False)
        assert len(hub.repos["org/bad"].commits) == commits  # nothing committed
    err = [line for line in failed.stderr.splitlines() if not line.startswith("INFO ")]  # progress logs
    assert failed.returncode == 1 and len(err) == 1, failed.stderr
    action = "push to" if command == "push" else "compact"
    assert err[0].startswith(f"error: {action} org/bad at {hub.url} failed: data/summary/zz-planted.parquet")
    assert ": not a readable parquet shard (" in err[0] and "nothing was committed" in err[0]


def test_a_cut_short_local_shard_is_named_before_anything_reaches_the_hub(tmp_path):
    ds = _dataset(tmp_path / "a", 2, seed=700)
    shard = sorted((ds / "data" / "sequences").glob("*.parquet"))[0]
    os.truncate(shard, 300)
    with FakeHub(token=TOKEN) as hub:
        failed = _py(["-m", "rollout_dataset.cli", "push", str(ds), "--repo", "org/cut"], _env(hub, tmp_path / "home"),
                     check=False)
        assert hub.repos == {}  # neither the dataset repo nor its -traces companion was created
    err = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert len(err) == 1 and err[0].startswith(f"error: {shard}: not a readable parquet shard"), failed.stderr



def test_a_rollout_held_twice_in_the_local_folder_is_pushed_once(tmp_path):
    ds = _dataset(tmp_path / "a", 2, seed=800)
    expected = {c: _local_ids(ds, c) for c in CONFIG_NAMES}
    for config in CONFIG_NAMES:  # a second copy of a shard (copied in by hand), sorting last
        first = sorted((ds / "data" / config).glob("*.parquet"))[0]
        shutil.copy(first, first.with_name("99991231T000000000000Z-copy.parquet"))
    with FakeHub(token=TOKEN) as hub:
        _push(ds, "org/twice", _env(hub, tmp_path / "home"))
        files = hub.files("org/twice")
    for config in CONFIG_NAMES:
        pushed = sorted(r for p, data in files.items() if p.startswith(f"data/{config}/") and p.endswith(".parquet")
                        for r in pq.read_table(io.BytesIO(data)).column("rollout_id").to_pylist())
        assert pushed == expected[config], config
    assert "**2 rollouts**" in files["README.md"].decode()


_PLANT_OTHER = """
import io, sys
import pyarrow as pa, pyarrow.parquet as pq
from huggingface_hub import HfApi
buf = io.BytesIO()
pq.write_table(pa.table({"x": [1]}), buf)
HfApi().upload_file(path_or_fileobj=buf.getvalue(), path_in_repo=sys.argv[2], repo_id=sys.argv[1], repo_type="dataset")
"""


def test_a_summary_shard_without_rollout_ids_in_the_repo_is_named_by_push(tmp_path):
    first, second = _dataset(tmp_path / "a", 1, seed=900), _dataset(tmp_path / "b", 1, seed=910)
    with FakeHub(token=TOKEN) as hub:
        env = _env(hub, tmp_path / "home")
        _push(first, "org/other", env)
        _py(["-c", _PLANT_OTHER, "org/other", "data/summary/zz-other.parquet"], env)
        failed = _py(["-m", "rollout_dataset.cli", "push", str(second), "--repo", "org/other"], env, check=False)
    err = [line for line in failed.stderr.splitlines() if not line.startswith("INFO ")]
    assert failed.returncode == 1 and len(err) == 1, failed.stderr
    assert err[0].startswith(f"error: push to org/other at {hub.url} failed: data/summary/zz-other.parquet: no "
                             "rollout_id column")
