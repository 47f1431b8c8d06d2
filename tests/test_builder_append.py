"""`build --append` (`builder.append.append_to_dataset`): new rollouts go into an existing dataset as
new shards, each rollout exactly once, existing shards untouched, atomically (a kill at any point
leaves the earlier dataset loadable)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from checkpoint_support import pausing_child, signal_when_paused
from rollout_dataset.builder import CONFIG_NAMES, build, staging
from rollout_dataset.builder.append import append_to_dataset
from rollout_dataset.builder.merge import merge_part, ordered_shard_names, tokenizer_identity
from rollout_dataset.builder.build import BuildResult
from support.synthetic_dataset import write_synthetic_rollout
from rollout_dataset.errors import DatasetDirError, TokenizerMismatchError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Artifact folders: `old` (2 rollouts, built into `earlier`) and `new` (3 more)."""
    root = tmp_path_factory.mktemp("append")
    for i in range(2):
        write_synthetic_rollout(root / "old" / f"r{i}", seed=10 + i, n_turns=2, context_tokens=64)
    for i in range(3):
        write_synthetic_rollout(root / "new" / f"r{i}", seed=20 + i, n_turns=2, context_tokens=64)
    build([root / "old"], root / "earlier", progress=False)
    return root


def _copy_earlier(corpus: Path, tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    shutil.copytree(corpus / "earlier", out)
    return out


def _ids(out: Path, config: str) -> list[str]:
    return sorted(r for s in (out / "data" / config).glob("*.parquet")
                  for r in pq.read_table(s, columns=["rollout_id"]).column("rollout_id").to_pylist())


def _files(out: Path) -> dict[str, tuple[bytes, int, int]]:
    return {str(p.relative_to(out)): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino)
            for p in out.rglob("*.parquet")}


def _summary_ids(folder: Path) -> list[str]:
    return [json.loads((f / "summary.json").read_text())["rollout_id"] for f in sorted(folder.iterdir())]


def test_append_adds_new_shards_each_rollout_once_and_leaves_existing_shards_untouched(corpus, tmp_path):
    out = _copy_earlier(corpus, tmp_path)
    before = _files(out)
    old_ids, new_ids = _summary_ids(corpus / "old"), _summary_ids(corpus / "new")
    result = append_to_dataset([corpus / "new", corpus / "old"], out, progress=False)
    assert result.added == new_ids  # in input order
    assert sorted(result.skipped) == sorted(old_ids)
    assert result.total_rollouts == 5
    after = _files(out)
    for path, (data, mtime, inode) in before.items():  # same files: bytes, mtime, inode
        assert after[path] == (data, mtime, inode), path
    assert len(after) == 2 * len(before)  # one new shard per config
    for config in CONFIG_NAMES:
        loaded = datasets.load_dataset(str(out), config, split="train", cache_dir=str(tmp_path / "cache"))
        assert set(loaded["rollout_id"]) == set(old_ids + new_ids), config
        assert sorted(loaded["rollout_id"]) == _ids(out, config)
    assert len(_ids(out, "summary")) == 5
    sessions = {p.stem for p in (out / "traces" / "sessions").glob("*.jsonl")}
    assert sessions == set(old_ids + new_ids)
    assert "**5 rollouts**" in (out / "README.md").read_text()  # the card counts old + new


def test_appending_the_same_folders_again_adds_nothing_and_reports_them_skipped(corpus, tmp_path):
    out = _copy_earlier(corpus, tmp_path)
    append_to_dataset([corpus / "new"], out, progress=False)
    listing = {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*")}
    again = append_to_dataset([corpus / "new", corpus / "old"], out, progress=False)
    assert again.added == [] and len(again.skipped) == 5 and again.total_rollouts == 5
    assert {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*")} == listing  # nothing touched
    for config in CONFIG_NAMES:
        ids = _ids(out, config)
        assert set(ids) == set(_ids(out, "summary")), config
    assert len(_ids(out, "summary")) == 5


def test_an_append_built_by_two_workers_adds_the_same_rows_in_the_same_order_as_one(corpus, tmp_path):
    one, two = _copy_earlier(corpus, tmp_path / "one"), _copy_earlier(corpus, tmp_path / "two")
    append_to_dataset([corpus / "new"], one, progress=False)
    result = append_to_dataset([corpus / "new"], two, progress=False, workers=2)
    assert result.added == _summary_ids(corpus / "new")
    for config in CONFIG_NAMES:
        rows = [pq.read_table(s).to_pylist() for s in sorted((one / "data" / config).glob("*.parquet"))]
        rows2 = [pq.read_table(s).to_pylist() for s in sorted((two / "data" / config).glob("*.parquet"))]
        assert sum(rows, []) == sum(rows2, []), config


def test_the_cli_refuses_workers_with_the_ray_executor(corpus, tmp_path):
    cli = [sys.executable, "-m", "rollout_dataset.cli", "build", str(corpus / "new"), "--out", str(tmp_path / "ds")]
    refused = subprocess.run([*cli, "--executor", "ray", "--workers", "2"], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "--workers goes with a local build" in refused.stdout + refused.stderr
    assert not (tmp_path / "ds").exists()


def test_merging_a_part_drops_the_rows_of_rollouts_the_dataset_already_holds(corpus, tmp_path):
    # the merge primitive (also the Ray build's): a part overlapping the dataset adds only what is new
    out = _copy_earlier(corpus, tmp_path)
    part = tmp_path / "part"
    build([corpus / "old" / "r1", corpus / "new" / "r0"], part, progress=False)
    present = set(_ids(out, "summary"))
    result = BuildResult(out_dir=out)
    merge_part(part, out, present, tokenizer_identity(out), result, ordered_shard_names())
    old_r1, new_r0 = _summary_ids(corpus / "old")[1], _summary_ids(corpus / "new")[0]
    assert result.added == [new_r0] and result.skipped == [old_r1]
    for config in CONFIG_NAMES:
        ids = _ids(out, config)
        per_rollout = {rid: ids.count(rid) for rid in set(ids)}
        assert set(per_rollout) == present, config
        assert per_rollout[old_r1] == _ids(corpus / "earlier", config).count(old_r1), config  # not doubled


def test_a_part_with_other_columns_is_refused_before_anything_is_merged(corpus, tmp_path):
    import pyarrow as pa

    out = _copy_earlier(corpus, tmp_path)
    part = tmp_path / "part"
    build([corpus / "new" / "r0"], part, progress=False)
    shard = next((part / "data" / "turns").glob("*.parquet"))
    pq.write_table(pq.read_table(shard).append_column("extra", pa.array([1] * pq.read_metadata(shard).num_rows)),
                   shard)  # as an older or newer rollout-dataset on another node might write it
    before = _files(out)
    with pytest.raises(FileNotFoundError, match=r"part: turns shard .* does not have the turns config's columns"):
        merge_part(part, out, set(_ids(out, "summary")), tokenizer_identity(out), BuildResult(out_dir=out),
                   ordered_shard_names(), label="part")
    assert _files(out) == before


def test_append_refuses_a_folder_that_is_not_a_rollout_dataset(corpus, tmp_path):
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(DatasetDirError, match=r"photos: not a rollout-dataset dataset \(it holds cat.jpg"):
        append_to_dataset([corpus / "new"], other, progress=False)
    with pytest.raises(DatasetDirError, match=r"missing: no such dataset folder"):
        append_to_dataset([corpus / "new"], tmp_path / "missing", progress=False)
    assert not (tmp_path / "missing").exists()
    assert sorted(p.name for p in other.iterdir()) == ["cat.jpg"]


def test_append_of_captures_with_another_tokenizer_is_refused_and_the_dataset_is_unchanged(corpus, tmp_path):
    from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR

    out = _copy_earlier(corpus, tmp_path)
    before = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    other = tmp_path / "other-tokenizer"
    shutil.copytree(BUILTIN_TOKENIZER_DIR, other)
    (other / "tokenizer.json").write_text(json.dumps(json.loads((other / "tokenizer.json").read_text()), indent=1))
    folder = tmp_path / "in" / "x"
    write_synthetic_rollout(folder, seed=99, n_turns=2, context_tokens=64)
    task = json.loads((folder / "task.json").read_text())
    task["config"]["tokenizer"] = str(other)
    (folder / "task.json").write_text(json.dumps(task))
    with pytest.raises(TokenizerMismatchError, match="differs from"):
        append_to_dataset([folder], out, progress=False)
    assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "in", "other-tokenizer"]  # no staging left


def test_a_second_append_while_one_holds_the_dataset_is_refused(corpus, tmp_path):
    out = _copy_earlier(corpus, tmp_path)
    with staging.locked_out_dir(out):  # what a running build or append holds
        with pytest.raises(DatasetDirError, match="another build is writing to it"):
            append_to_dataset([corpus / "new"], out, progress=False)
    assert len(append_to_dataset([corpus / "new"], out, progress=False).added) == 3


def test_a_compaction_waits_for_no_append_and_an_append_for_no_compaction(corpus, tmp_path):
    from rollout_dataset.builder.compaction import compact_local

    out = _copy_earlier(corpus, tmp_path)
    append_to_dataset([corpus / "new"], out, progress=False)  # two shards per config: work for compact
    with staging.locked_out_dir(out):  # an append (or build) running: its swap would undo a compaction
        with pytest.raises(FileNotFoundError, match="a build or append is writing to it; compact it when"):
            compact_local(out)
    assert len(list((out / "data" / "summary").glob("*.parquet"))) == 2
    assert compact_local(out).shards_after["summary"] == 1
    assert sorted(_ids(out, "summary")) == sorted(_summary_ids(corpus / "old") + _summary_ids(corpus / "new"))


def test_the_cli_appends_and_refuses_a_folder_that_is_not_a_dataset(corpus, tmp_path):
    out = _copy_earlier(corpus, tmp_path)
    cli = [sys.executable, "-m", "rollout_dataset.cli", "build", str(corpus / "new"), "--out"]
    ok = subprocess.run([*cli, str(out), "--append", "--no-progress"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "5 rollouts (3 added, 0 already there)" in ok.stdout
    (tmp_path / "notes").mkdir()
    refused = subprocess.run([*cli, str(tmp_path / "notes"), "--append"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1
    assert f"error: {tmp_path / 'notes'}: not a rollout-dataset dataset" in refused.stderr


# --- killed appends ------------------------------------------------------------------------------

# the child: append, stopping the `nth` time it reaches `step` (builder.staging.checkpoint); prints
# PAUSED there and waits to be killed
CHILD = pausing_child("""
    from rollout_dataset.builder.append import append_to_dataset

    step, nth, out, inputs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    pause_at(step, nth)
    append_to_dataset(inputs, out, progress=False)
    print("DONE", flush=True)
""")


def _kill_at(corpus: Path, tmp_path: Path, step: str, nth: int, sig: int) -> tuple[Path, int]:
    out = _copy_earlier(corpus, tmp_path)
    return out, signal_when_paused(CHILD, [step, str(nth), str(out), str(corpus / "new")], sig)


def _loaded_ids(out: Path, cache: Path) -> set[str]:
    ids = set(datasets.load_dataset(str(out), "summary", split="train", cache_dir=str(cache))["rollout_id"])
    for config in ("sequences", "turns"):  # no config holds rows of rollouts another lacks
        assert set(datasets.load_dataset(str(out), config, split="train", cache_dir=str(cache))["rollout_id"]) == ids
    return ids


# "rollout": while the new rollouts are built; "merged": new shards moved into the staging folder;
# "staged" (2nd: the 1st is the inner build's): card written, just before the swap
@pytest.mark.parametrize(("step", "nth", "sig"), [("rollout", 2, signal.SIGKILL), ("merged", 1, signal.SIGKILL),
                                                  ("staged", 2, signal.SIGKILL), ("merged", 1, signal.SIGTERM)])
def test_a_killed_append_leaves_the_earlier_dataset_exactly_and_a_rerun_adds_the_rest(corpus, tmp_path, step, nth,
                                                                                    sig):
    before = {str(p.relative_to(corpus / "earlier")): p.read_bytes()
              for p in (corpus / "earlier").rglob("*") if p.is_file()}
    out, code = _kill_at(corpus, tmp_path, step, nth, sig)
    assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 143)
    assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert _loaded_ids(out, tmp_path / "cache") == set(_summary_ids(corpus / "old"))
    if sig == signal.SIGTERM:  # cleaned up on the way out
        assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["ds"]
    result = append_to_dataset([corpus / "old", corpus / "new"], out, progress=False)
    assert result.total_rollouts == 5 and len(_ids(out, "summary")) == 5
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["ds"]  # leftovers removed


def test_a_kill_right_after_the_swap_leaves_the_new_dataset_whole(corpus, tmp_path):
    out, code = _kill_at(corpus, tmp_path, "swapped", 2, signal.SIGKILL)  # the 1st is the inner build's
    assert code == -signal.SIGKILL
    assert len(_loaded_ids(out, tmp_path / "cache")) == 5
    assert append_to_dataset([corpus / "new"], out, progress=False).added == []
