"""Batch throughput: rollouts per second through the real capture against the local backend
(oracle policy), local executor at concurrency 1 and 4, and the time spent on the batch's own
outputs (run records, statistics, plots, report) for 1,000 synthetic rollouts.

Prints a table and saves bench/results/batch_throughput.json. Not a test: figures depend on the
machine (and on whatever else it is running).
"""

from __future__ import annotations

import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

from rollout_dataset.batch import AchievementSnapshot, BatchConfig, RolloutResult, run_batch

RESULTS = Path(__file__).resolve().parent / "results" / "batch_throughput.json"


def real_batch(tmp: Path, concurrency: int, seeds: int, per_seed: int) -> dict:
    config = BatchConfig(out_dir=tmp / f"real-c{concurrency}", seeds=list(range(seeds)), rollouts_per_seed=per_seed,
                         concurrency=concurrency, progress=False, build_dataset=False)
    t0 = time.perf_counter()
    result = run_batch(config)
    wall = time.perf_counter() - t0
    return {"rollouts": result.ran, "concurrency": concurrency, "wall_s": round(wall, 2),
            "rollouts_per_s": round(result.ran / wall, 3)}


def synthetic(job):
    rng = random.Random(job.seed * 1000 + job.rollout_idx)
    timeline = [AchievementSnapshot(t, frozenset(e for e in ("example_1", "example_2", "example_3") if rng.random() < 0.2 * t))
                for t in range(6)]
    return RolloutResult(final_return=rng.random(), num_steps=6, tool_calls_total=8, timeline=timeline, model="synthetic")


def outputs_only(tmp: Path, n: int) -> dict:
    config = BatchConfig(out_dir=tmp / "synthetic", seeds=list(range(n // 10)), rollouts_per_seed=10, concurrency=8,
                         progress=False, base_url="http://127.0.0.1:9/v1")
    run_batch(config, run_one=synthetic)  # run once, then time a resume: only the outputs are redone
    t0 = time.perf_counter()
    run_batch(config, run_one=synthetic)
    return {"rollouts": n, "outputs_s": round(time.perf_counter() - t0, 2)}


def main() -> int:
    seeds, per_seed = int(os.environ.get("BENCH_SEEDS", 4)), int(os.environ.get("BENCH_PER_SEED", 2))
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
        tmp = Path(tmp)
        rows = [real_batch(tmp, c, seeds, per_seed) for c in (1, 4)]
        outputs = outputs_only(tmp, 1000)
    doc = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform(),
                    "loadavg_1m": round(os.getloadavg()[0], 2)},
        "real_capture": rows,
        "outputs_for_synthetic_rollouts": outputs,
    }
    print("executor  concurrency  rollouts  wall_s  rollouts/s")
    for r in rows:
        print(f"local     {r['concurrency']:<11d}  {r['rollouts']:<8d}  {r['wall_s']:<6}  {r['rollouts_per_s']}")
    print(f"outputs (records, stats, 6 plots, report) for {outputs['rollouts']} rollouts: {outputs['outputs_s']} s")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"saved {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
