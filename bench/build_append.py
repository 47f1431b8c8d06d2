"""Benchmark of incremental and distributed builds (issue 14, items 2 and 5). Prints a table and saves
bench/results/build_append.json.

Synthetic rollouts (`tests/support/synthetic_dataset.py`, default 2 turns, 256-token context):
- `build --append` of `--add` rollouts to a dataset of `--base` rollouts, vs building all of them
  from scratch (what a build without incremental shards would cost); the append re-reads only the
  existing summary shards and hard-links every other existing file;
- appending the same folders again (every rollout skipped before being built);
- a Ray build (`--parts 2` on a local Ray instance of 2 CPUs, start-up time reported apart) vs the
  local build of the same `--base` folders.

Usage: python bench/build_append.py [--base 200] [--add 20] [--no-ray]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rollout_dataset.builder import build
from rollout_dataset.builder.append import append_to_dataset
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support/: the synthetic fixtures
from support.synthetic_dataset import write_synthetic_dataset

RESULTS = Path(__file__).resolve().parent / "results" / "build_append.json"


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=200, help="rollouts already in the dataset (default 200)")
    parser.add_argument("--add", type=int, default=20, help="rollouts appended (default 20)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray build")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-append-"))
    shape = {"n_turns": 2, "context_tokens": 256}
    out: dict = {"shape": {"base": args.base, "add": args.add, **shape}}
    try:
        write_synthetic_dataset(root / "base", args.base, seed=0, **shape)
        write_synthetic_dataset(root / "add", args.add, seed=10_000, **shape)
        base_s, _ = timed(build, [root / "base"], root / "ds", progress=False)
        append_s, r = timed(append_to_dataset, [root / "add"], root / "ds", progress=False)
        assert len(r.added) == args.add
        again_s, r = timed(append_to_dataset, [root / "add", root / "base"], root / "ds", progress=False)
        assert not r.added
        full_s, _ = timed(build, [root / "base", root / "add"], root / "full", progress=False)
        out.update(build_base_s=round(base_s, 2), append_s=round(append_s, 2), append_again_s=round(again_s, 2),
                   rebuild_all_s=round(full_s, 2))
        print(f"dataset of {args.base} rollouts ({shape['n_turns']} turns, {shape['context_tokens']}-token context):")
        print(f"  build --append of {args.add} rollouts:        {append_s:7.2f} s")
        print(f"  the same folders appended again (all skipped): {again_s:7.2f} s")
        print(f"  building all {args.base + args.add} from scratch:          {full_s:7.2f} s")
        if not args.no_ray:
            import ray

            from rollout_dataset.builder.distributed import build_on_ray

            start_s, _ = timed(ray.init, num_cpus=2, include_dashboard=False, log_to_driver=False)
            try:
                ray_s, _ = timed(build_on_ray, [root / "base"], root / "ray", parts=2)
            finally:
                ray.shutdown()
            out.update(ray_init_s=round(start_s, 2), ray_build_s=round(ray_s, 2), local_build_s=round(base_s, 2))
            print(f"  Ray build of the {args.base} (2 parts, local Ray with 2 CPUs): {ray_s:7.2f} s "
                  f"(+{start_s:.1f} s Ray start) vs local build {base_s:.2f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
