"""What the build's integrity costs: checking each folder as `validate` does, and the staged, atomic swap.

On synthetic schema-faithful rollouts, measures:
- the check of one artifact folder (`check_artifact_dir`: read, schemas, semantic and cross-file checks),
  what of it is reading and parsing the JSON (which a build did before it checked anything), and the
  rest's share of the whole build time;
- adding one rollout to a dataset of N rollouts: the whole build call, and the part spent staging
  (hard-linking the existing shards beside `--out`) and swapping the folder into place.

Prints a table and saves bench/results/build_integrity.json.

Usage: python bench/build_integrity.py [--rollouts 20] [--turns 30] [--context 4096]
"""

from __future__ import annotations

import sys
import argparse
import json
import tempfile
import time
from pathlib import Path

from rollout_dataset.builder import build, staging
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support/: the synthetic fixtures
from support.synthetic_dataset import write_synthetic_rollout
from rollout_dataset.schema.check import check_artifact_dir

RESULTS = Path(__file__).resolve().parent / "results" / "build_integrity.json"


def main() -> None:
    """Run the measurements, print them, save them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=20)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--context", type=int, default=4096)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-build-integrity-") as tmp:
        root = Path(tmp)
        folders = [root / "art" / f"r{i:03d}" for i in range(args.rollouts)]
        for i, folder in enumerate(folders):
            write_synthetic_rollout(folder, seed=i, n_turns=args.turns, context_tokens=args.context)
        artifact_bytes = sum(p.stat().st_size for f in folders for p in f.iterdir())
        check_s = parse_s = float("inf")
        for _ in range(2):  # best of two: the machine is shared
            t = time.perf_counter()
            for folder in folders:
                assert check_artifact_dir(folder) == [], folder
            check_s = min(check_s, time.perf_counter() - t)
            t = time.perf_counter()
            for folder in folders:  # what a build reads and parses anyway, checked or not
                for path in folder.glob("*.json"):
                    json.loads(path.read_text(encoding="utf-8"))
            parse_s = min(parse_s, time.perf_counter() - t)
        t = time.perf_counter()
        build([root / "art"], root / "ds", progress=False)
        build_s = time.perf_counter() - t

        extra = root / "extra" / "r"
        write_synthetic_rollout(extra, seed=10_000, n_turns=args.turns, context_tokens=args.context)
        spans: dict[str, float] = {}
        marks: dict[str, float] = {}
        original_commit, original_staging = staging.commit, staging.staging_folder

        def timed_commit(stage, out, **kw):
            t0 = time.perf_counter()
            original_commit(stage, out, **kw)
            spans["swap_s"] = time.perf_counter() - t0

        def timed_staging(out):
            t0 = time.perf_counter()
            cm = original_staging(out)
            stage = cm.__enter__()
            spans["stage_s"] = time.perf_counter() - t0

            class _Wrap:
                def __enter__(self):
                    return stage

                def __exit__(self, *exc):
                    return cm.__exit__(*exc)
            return _Wrap()

        staging.commit, staging.staging_folder = timed_commit, timed_staging
        try:
            t = time.perf_counter()
            build([extra], root / "ds", progress=False)
            marks["add_one_s"] = time.perf_counter() - t
        finally:
            staging.commit, staging.staging_folder = original_commit, original_staging
        shards = len(list((root / "ds").rglob("*.parquet")))
        dataset_bytes = sum(p.stat().st_size for p in (root / "ds").rglob("*") if p.is_file())
    figures = {
        "rollouts": args.rollouts, "turns": args.turns, "context_tokens": args.context,
        "artifact_mb": round(artifact_bytes / 1e6, 1), "dataset_mb": round(dataset_bytes / 1e6, 1),
        "check_s_per_rollout": round(check_s / args.rollouts, 4),
        "build_s_per_rollout": round(build_s / args.rollouts, 4),
        "parse_s_per_rollout": round(parse_s / args.rollouts, 4),
        "check_beyond_parse_s_per_rollout": round((check_s - parse_s) / args.rollouts, 4),
        "check_beyond_parse_share_of_build": round((check_s - parse_s) / build_s, 3),
        "add_one_rollout_s": round(marks["add_one_s"], 3),
        "add_one_stage_s": round(spans["stage_s"], 4),
        "add_one_swap_s": round(spans["swap_s"], 4),
        "shards_after": shards,
    }
    for key, value in figures.items():
        print(f"{key:>24}  {value}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
