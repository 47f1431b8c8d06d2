"""The `samples` config (viewer preview by default, lossless parts on request) and summary.env_metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from rollout_dataset.builder import build, features
from rollout_dataset.builder.rows import MAX_CELL_BYTES, PREVIEW_CHARS
from support.synthetic_dataset import write_synthetic_rollout
from rollout_dataset.errors import ConfigError

HEADER = "# Rollout r-long\n\nreward: 0.5 | passed: 2/4 | stop reason: final_answer | calls: 3 | fragments: 1\n\n"
_MARKER = re.compile(r"\[\.\.\. (\d+) characters cut from the middle \.\.\.\]")


def _rows(dataset_dir: Path, config: str) -> list[dict]:
    rows = []
    for shard in sorted((dataset_dir / "data" / config).glob("*.parquet")):
        rows.extend(pq.read_table(shard).to_pylist())
    return rows


def _long_sample(n_lines: int) -> str:
    """A samples.md shaped like render_samples' output: header, a section, a long token stream."""
    body = "".join(f"<|im_start|>assistant step {k}: print({k})<|im_end|>\n" for k in range(n_lines))
    return HEADER + "## agent (every call on an agent sequence, in arrival order)\n\n````text\n" + body + "````\n"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("samples")
    long_dir, short_dir, crafter_dir = root / "in" / "long", root / "in" / "short", root / "in" / "crafter"
    write_synthetic_rollout(long_dir, seed=1, n_turns=2, context_tokens=64)
    write_synthetic_rollout(short_dir, seed=2, n_turns=2, context_tokens=64)
    write_synthetic_rollout(crafter_dir, seed=3, n_turns=2, context_tokens=64, with_tests=False)
    (long_dir / "samples.md").write_text(_long_sample(24_000), encoding="utf-8")  # ~1.3 MB: 2 parts in full mode
    return root, long_dir, short_dir, crafter_dir


def _by_folder(rows: list[dict], folder: Path) -> list[dict]:
    rid = json.loads((folder / "summary.json").read_text())["rollout_id"]
    return sorted((r for r in rows if r["rollout_id"] == rid), key=lambda r: r["part"])


def test_preview_is_one_bounded_row_that_keeps_the_header_and_says_how_much_was_cut(artifacts, tmp_path):
    root, long_dir, _, _ = artifacts
    build([long_dir], tmp_path / "ds", progress=False)
    full = (long_dir / "samples.md").read_text(encoding="utf-8")
    (row,) = _rows(tmp_path / "ds", "samples")
    marker = _MARKER.search(row["text"])
    assert row["part"] == 0 and row["truncated"] is True and row["full_chars"] == len(full)
    assert len(row["text"]) <= PREVIEW_CHARS + 60
    assert marker is not None and int(marker.group(1)) == len(full) - PREVIEW_CHARS
    assert row["text"].startswith(HEADER + "## agent") and full.startswith(row["text"][: marker.start()].rstrip("\n"))
    assert full.endswith(row["text"][marker.end():].lstrip("\n"))
    assert _rows(tmp_path / "ds", "summary")[0]["n_sample_rows"] == 1


def test_a_sample_within_the_preview_size_is_kept_whole_and_not_marked_truncated(artifacts, tmp_path):
    _, _, short_dir, _ = artifacts
    build([short_dir], tmp_path / "ds", progress=False, preview_chars=100_000)
    (row,) = _rows(tmp_path / "ds", "samples")
    full = (short_dir / "samples.md").read_text(encoding="utf-8")
    assert (row["text"], row["truncated"], row["full_chars"]) == (full, False, len(full))


def test_full_mode_keeps_samples_md_whole_in_parts_under_the_cell_limit(artifacts, tmp_path):
    _, long_dir, short_dir, _ = artifacts
    build([long_dir, short_dir], tmp_path / "ds", progress=False, samples="full")
    rows = _rows(tmp_path / "ds", "samples")
    for folder in (long_dir, short_dir):
        full = (folder / "samples.md").read_text(encoding="utf-8")
        parts = _by_folder(rows, folder)
        assert "".join(p["text"] for p in parts) == full
        assert all(not p["truncated"] and p["full_chars"] == len(full) for p in parts)
        assert all(len(p["text"].encode()) <= MAX_CELL_BYTES for p in parts)
    assert len(_by_folder(rows, long_dir)) > 1
    assert {r["samples_mode"] for r in _rows(tmp_path / "ds", "summary")} == {"full"}


def test_both_modes_load_with_the_same_features_and_their_shards_coexist(artifacts, tmp_path):
    _, long_dir, short_dir, _ = artifacts
    build([long_dir], tmp_path / "ds", progress=False)  # preview
    build([short_dir], tmp_path / "ds", progress=False, samples="full")  # full, into the same dataset
    build([short_dir], tmp_path / "full-only", progress=False, samples="full")
    cache = tmp_path / "cache"
    mixed = datasets.load_dataset(str(tmp_path / "ds"), "samples", split="train", cache_dir=str(cache))
    full_only = datasets.load_dataset(str(tmp_path / "full-only"), "samples", split="train", cache_dir=str(cache))
    assert mixed.features == full_only.features == features("samples")
    assert sorted(mixed["truncated"]) == [False, True]
    readme = (tmp_path / "ds" / "README.md").read_text()
    assert "**preview** mode (1 rollout)" in readme and "**full** mode (1 rollout)" in readme


def test_the_card_names_the_mode_and_how_to_get_the_full_text(artifacts, tmp_path):
    _, long_dir, _, _ = artifacts
    readme = build([long_dir], tmp_path / "ds", progress=False).readme.read_text()
    assert "**preview** mode (1 rollout)" in readme and "--samples full" in readme
    assert "samples.md" in readme and "### The tokenizer" in readme


def test_an_unknown_samples_mode_is_a_clear_error_and_writes_nothing(artifacts, tmp_path):
    _, long_dir, _, _ = artifacts
    with pytest.raises(ConfigError, match="'partial'.*preview, full"):
        build([long_dir], tmp_path / "ds", progress=False, samples="partial")
    assert not (tmp_path / "ds").exists()


def test_cli_build_samples_full_keeps_every_part(artifacts, tmp_path, capsys):
    from rollout_dataset.cli import main

    _, long_dir, _, _ = artifacts
    assert main(["build", str(long_dir), "--out", str(tmp_path / "ds"), "--no-progress", "--samples", "full"]) == 0
    parts = _rows(tmp_path / "ds", "samples")
    assert "".join(p["text"] for p in parts) == (long_dir / "samples.md").read_text(encoding="utf-8")


def test_summary_env_metrics_is_a_json_column_declared_from_the_schema(artifacts, tmp_path):
    _, _, short_dir, crafter_dir = artifacts
    build([short_dir, crafter_dir], tmp_path / "ds", progress=False)
    column = next(c for c in features("summary") if c == "env_metrics")
    assert features("summary")[column].dtype == "string"
    by_rid = {r["rollout_id"]: r for r in _rows(tmp_path / "ds", "summary")}
    crafter = json.loads((crafter_dir / "summary.json").read_text())
    coding = json.loads((short_dir / "summary.json").read_text())
    assert json.loads(by_rid[crafter["rollout_id"]]["env_metrics"]) == crafter["env_metrics"]
    assert by_rid[coding["rollout_id"]]["env_metrics"] is None
