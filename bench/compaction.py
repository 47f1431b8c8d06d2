"""Benchmark of compaction (issue 14, item 3). Prints a table and saves bench/results/compaction.json.

Builds a synthetic dataset (default 500 rollouts, 2 turns, 256-token context), splits every config
into one shard per rollout (500 small shards per config, as 500 one-rollout pushes leave them), then
measures `datasets.load_dataset(dir, CONFIG, split="train")` on one config:
- over the 500 small shards;
- after `rollout_dataset.builder.compaction.compact_local` (default target size);
each in a fresh subprocess with an empty datasets cache (import time excluded, reported apart), best
of `--repeats`. Also reports the compaction's own wall time and the shard counts and bytes.

Usage: python bench/compaction.py [--shards 500] [--config turns] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from rollout_dataset.builder import CONFIG_NAMES, build
from rollout_dataset.builder.synthetic import write_synthetic_dataset
from rollout_dataset.builder.writer import ConfigWriter, shard_name
from rollout_dataset.builder.compaction import DEFAULT_TARGET_BYTES, compact_local

RESULTS = Path(__file__).resolve().parent / "results" / "compaction.json"

_LOAD = """
import json, sys, time
t0 = time.perf_counter()
import datasets
t1 = time.perf_counter()
ds = datasets.load_dataset(sys.argv[1], sys.argv[2], split="train", cache_dir=sys.argv[3])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "rows": len(ds)}))
"""


def split_per_rollout(ds: Path) -> None:
    """Rewrite every config as one shard per rollout (summary order), with the builder's writer."""
    ids = pq.read_table(next((ds / "data" / "summary").glob("*.parquet")), columns=["rollout_id"])["rollout_id"]
    for config in CONFIG_NAMES:
        folder = ds / "data" / config
        old = sorted(folder.glob("*.parquet"))
        table = pq.read_table(old[0]) if len(old) == 1 else None
        if table is None:
            continue
        for rid in ids.to_pylist():
            w = ConfigWriter(config, folder / shard_name())
            w.add_table(table.filter(pc.equal(table["rollout_id"], rid)).cast(w.schema))
            w.close()
        old[0].unlink()


def time_load(ds: Path, config: str, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
            out = subprocess.run([sys.executable, "-c", _LOAD, str(ds), config, cache], capture_output=True,
                                 text=True, check=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["load_s"])
    return {"load_s": round(best["load_s"], 3), "import_s": round(best["import_s"], 3), "rows": best["rows"],
            "all_load_s": [round(r["load_s"], 3) for r in runs]}


def shards_and_bytes(ds: Path, config: str) -> tuple[int, int]:
    files = list((ds / "data" / config).glob("*.parquet"))
    return len(files), sum(f.stat().st_size for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=500, help="rollouts = small shards per config (default 500)")
    parser.add_argument("--config", default="turns", help="config loaded (default turns)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh-process loads per point, best kept (default 3)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    try:
        write_synthetic_dataset(root / "artifacts", args.shards, n_turns=2, context_tokens=256)
        ds = root / "ds"
        build([root / "artifacts"], ds, progress=False)
        split_per_rollout(ds)
        n_before, b_before = shards_and_bytes(ds, args.config)
        before = time_load(ds, args.config, args.repeats)
        t0 = time.perf_counter()
        result = compact_local(ds)
        compact_s = time.perf_counter() - t0
        n_after, b_after = shards_and_bytes(ds, args.config)
        after = time_load(ds, args.config, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert before["rows"] == after["rows"]
    out = {
        "shape": {"rollouts": args.shards, "turns": 2, "context_tokens": 256, "config": args.config},
        "before": {"shards": n_before, "bytes": b_before, **before},
        "after": {"shards": n_after, "bytes": b_after, **after},
        "compact_s": round(compact_s, 2),
        "compact_shards": {c: [result.shards_before[c], result.shards_after[c]] for c in CONFIG_NAMES},
        "target_bytes": DEFAULT_TARGET_BYTES,
        "speedup": round(before["load_s"] / after["load_s"], 1) if after["load_s"] else None,
    }
    print(f"load_dataset(dir, {args.config!r}) of {before['rows']} rows, fresh process, empty cache (best of "
          f"{args.repeats}; imports ~{before['import_s']:.1f}s excluded):")
    print(f"  {n_before:5d} shards, {b_before / 1e6:7.2f} MB: {before['load_s']:7.2f} s  {before['all_load_s']}")
    print(f"  {n_after:5d} shards, {b_after / 1e6:7.2f} MB: {after['load_s']:7.2f} s  {after['all_load_s']}"
          f"   (compact_local of all configs took {compact_s:.1f} s)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
