"""A `build` killed at any moment (SIGKILL or SIGTERM) leaves the earlier dataset loadable; a rerun works.

Each test runs `build` in a child process that stops at a named point of the build (the
`builder.staging.checkpoint` hook, replaced by the child: no sleeps to guess the moment), kills it
there, loads `--out` with `datasets.load_dataset`, then builds again.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from checkpoint_support import pausing_child, signal_when_paused
from rollout_dataset.builder import build
from support.synthetic_dataset import write_synthetic_rollout

# the child: build, stopping at the `nth` time the build reaches `step`; prints PAUSED there and waits
# (at most a few seconds: inside the swap SIGTERM is held back until the swap is done)
CHILD = pausing_child("""
    import os
    from rollout_dataset.builder import build

    step, nth, out, inputs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    pause_at(step, nth)
    if os.environ.get("NO_EXCHANGE"):
        staging._exchange = lambda a, b: False
    build(inputs, out, progress=False)
    print("DONE", flush=True)
""")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("atomic")
    old = [write_synthetic_rollout(root / "old" / f"r{i}", seed=10 + i, n_turns=2, context_tokens=64) for i in range(2)]
    new = [write_synthetic_rollout(root / "new" / f"r{i}", seed=20 + i, n_turns=2, context_tokens=64) for i in range(3)]
    result = build([root / "old"], root / "earlier", progress=False)
    return root, set(result.added), len(old) + len(new)


def _summary_ids(out: Path, cache: Path) -> set[str]:
    """Load the dataset as a user would (summary and sequences); every shard must be complete."""
    for shard in out.rglob("*.parquet"):
        pq.ParquetFile(shard)  # raises on a footerless shard
    ids = set(datasets.load_dataset(str(out), "summary", split="train", cache_dir=str(cache))["rollout_id"])
    sequences = datasets.load_dataset(str(out), "sequences", split="train", cache_dir=str(cache))
    assert set(sequences["rollout_id"]) == ids  # no config holds rows of rollouts another lacks
    return ids


def _kill_at(corpus, tmp_path, step: str, nth: int, sig: int, env: dict | None = None) -> tuple[Path, int]:
    root, _, _ = corpus
    out = tmp_path / "ds"
    shutil.copytree(root / "earlier", out)
    return out, signal_when_paused(CHILD, [step, str(nth), str(out), str(root / "new")], sig,
                                   env={**os.environ, **(env or {})})


def _siblings(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("cache"))


def _rerun_adds_the_rest(corpus, tmp_path, out: Path) -> None:
    root, _, total = corpus
    result = build([root / "old", root / "new"], out, progress=False)
    assert result.total_rollouts == total
    ids = {r for shard in (out / "data" / "summary").glob("*.parquet")
           for r in pq.read_table(shard, columns=["rollout_id"]).column("rollout_id").to_pylist()}
    assert len(ids) == total
    assert _siblings(tmp_path) == ["ds"]  # leftovers of the killed build removed


@pytest.mark.parametrize(("step", "nth"), [("rollout", 1), ("rollout", 2), ("staged", 1)])
def test_sigkill_while_building_leaves_the_earlier_dataset_and_a_rerun_works(corpus, tmp_path, step, nth):
    out, code = _kill_at(corpus, tmp_path, step, nth, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert _summary_ids(out, tmp_path / "cache") == corpus[1]
    _rerun_adds_the_rest(corpus, tmp_path, out)


def test_sigkill_after_the_swap_leaves_the_new_dataset_and_a_rerun_cleans_up(corpus, tmp_path):
    out, code = _kill_at(corpus, tmp_path, "swapped", 1, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert len(_summary_ids(out, tmp_path / "cache")) == corpus[2]
    assert any(".staging-" in name for name in _siblings(tmp_path))  # the earlier dataset, not yet deleted
    _rerun_adds_the_rest(corpus, tmp_path, out)


@pytest.mark.parametrize(("step", "nth"), [("rollout", 1), ("staged", 1)])
def test_sigterm_while_building_removes_the_staging_folder_and_keeps_the_earlier_dataset(corpus, tmp_path, step, nth):
    out, code = _kill_at(corpus, tmp_path, step, nth, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM
    assert _siblings(tmp_path) == ["ds"]
    assert _summary_ids(out, tmp_path / "cache") == corpus[1]
    _rerun_adds_the_rest(corpus, tmp_path, out)


def test_sigterm_during_the_swap_is_held_until_the_new_dataset_is_in_place(corpus, tmp_path):
    out, code = _kill_at(corpus, tmp_path, "swapped", 1, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM
    assert _siblings(tmp_path) == ["ds"]
    assert len(_summary_ids(out, tmp_path / "cache")) == corpus[2]


def test_without_an_atomic_exchange_a_kill_between_the_renames_is_repaired_by_the_next_build(corpus, tmp_path):
    out, code = _kill_at(corpus, tmp_path, "aside", 1, signal.SIGKILL, env={"NO_EXCHANGE": "1"})
    assert code == -signal.SIGKILL
    aside = [p for p in tmp_path.iterdir() if ".old-" in p.name]
    assert not out.exists() and len(aside) == 1
    assert _summary_ids(aside[0], tmp_path / "cache") == corpus[1]  # the earlier dataset, whole
    _rerun_adds_the_rest(corpus, tmp_path, out)


def test_a_staging_folder_in_use_by_a_running_build_is_left_alone(corpus, tmp_path):
    import os as _os

    from rollout_dataset.builder import staging

    root, _, _ = corpus
    out = tmp_path / "ds"
    shutil.copytree(root / "earlier", out)
    running = tmp_path / "ds.staging-4194301"  # a pid that is, or is not, alive: the lock decides
    running.mkdir()
    fd = staging.lock_folder(running)  # what a build running in another process holds
    try:
        build([root / "new"], out, progress=False)
        assert running.is_dir()
    finally:
        _os.close(fd)
    build([root / "new"], out, progress=False)  # now abandoned: removed
    assert not running.exists()


def test_a_full_disk_while_writing_a_shard_names_the_shard_and_keeps_the_earlier_dataset(corpus, tmp_path, monkeypatch,
                                                                                        capsys):
    from rollout_dataset.cli import main

    root, old_ids, _ = corpus
    out = tmp_path / "ds"
    shutil.copytree(root / "earlier", out)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))

    def full_disk(self, table, row_group_size=None):  # pyarrow's own words for a full disk
        raise OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full_disk)
    assert main(["build", str(root / "new"), "--out", str(out), "--no-progress"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith(f"error: {out.parent / out.name}.staging-{os.getpid()}/data/")
    assert ".parquet: Error writing bytes to file" in err[0] and err[0].endswith(f"{out} left as it was")
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
