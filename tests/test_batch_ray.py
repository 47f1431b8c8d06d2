"""`--executor ray`: each rollout is a Ray task on a local Ray instance (2 CPUs, no dashboard);
the artifacts come back to the driver, which writes them where the local executor would."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is the optional extra rollout-dataset[ray]")

from rollout_dataset.batch import AchievementSnapshot, BatchConfig, RolloutResult, run_batch  # noqa: E402
from rollout_dataset.batch.executor import LocalExecutor, RayExecutor, RolloutJob  # noqa: E402

# the stand-in below lives in this test module, which Ray workers cannot import: ship it by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def standin(job: RolloutJob) -> RolloutResult:
    folder = Path(job.artifact_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes").mkdir(exist_ok=True)
    (folder / "notes" / "transcript.txt").write_text(f"seed {job.seed} rollout {job.rollout_idx}\n")
    rng = random.Random(job.seed * 1000 + job.rollout_idx)
    timeline = [AchievementSnapshot(t, frozenset(e for e in ("example_1", "example_2") if rng.random() < 0.5)) for t in range(3)]
    return RolloutResult(final_return=rng.random(), num_steps=3, tool_calls_total=4, timeline=timeline, model="stand-in", task_id=f"t{job.seed}")


def records(out: Path, strategy: str) -> list[dict]:
    rows = [json.loads(line) for line in (out / "runs" / f"{strategy}.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "timestamp"} for r in rows]


def test_ray_executor_writes_the_same_outputs_as_the_local_one(tmp_path):
    common = dict(seeds=[0, 1, 2], rollouts_per_seed=2, progress=False, base_url="http://127.0.0.1:9/v1", concurrency=2)
    ray_cfg = BatchConfig(out_dir=tmp_path / "ray", executor="ray", **common)
    local_cfg = BatchConfig(out_dir=tmp_path / "local", **common)
    ray_result = run_batch(ray_cfg, run_one=standin, executor=RayExecutor(concurrency=2, num_cpus=2))
    run_batch(local_cfg, run_one=standin, executor=LocalExecutor(2))
    assert ray_result.ran == 6
    assert not ray.is_initialized()  # the executor shut down the instance it started
    for folder in (ray_cfg.out_dir / "rollouts").iterdir():
        assert (folder / "notes" / "transcript.txt").read_text().startswith("seed ")
        assert (folder / "batch_result.json").is_file()
    # rollout ids differ between the two batches (each has its own batch id); everything else is equal
    strip = lambda rows: [{k: v for k, v in r.items() if k != "rollout_id"} for r in rows]  # noqa: E731
    for strategy in ("simple", "complex"):
        assert strip(records(ray_cfg.out_dir, strategy)) == strip(records(local_cfg.out_dir, strategy))
