"""A batch with a push_repo (the CLI fills it from PUSH_TO_DATASET) builds dataset/ and pushes it (loopback Hub, tests/hub_fixture.py);
resuming the same batch pushes again without duplicating a rollout."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path
import sys

import pyarrow.parquet as pq

from hub_fixture import FakeHub

TOKEN = "hf_batchPushTokenMustNeverLeak0123456789"

# huggingface_hub reads HF_ENDPOINT at import, so the batch runs in a subprocess; its rollouts are
# synthetic artifact folders (the builder's generator) with a recorded achievement timeline.
SCRIPT = """
import sys
from rollout_dataset.batch import AchievementSnapshot, BatchConfig, result_from_artifacts, run_batch, write_achievements
from support.synthetic_dataset import write_synthetic_rollout

def run_one(job):
    write_synthetic_rollout(job.artifact_dir, n_turns=2, context_tokens=64, seed=job.seed, rollout_id=job.rollout_id)
    write_achievements(job.artifact_dir, env="coding", catalogue=["example_1"],
                       timeline=[AchievementSnapshot(1, frozenset({"example_1"}))])
    return result_from_artifacts(job.artifact_dir, replay=False)

config = BatchConfig(out_dir=sys.argv[1], seeds=[0, 1], rollouts_per_seed=1, progress=False,
                     base_url="http://127.0.0.1:9/v1", strategies=("simple",), push_repo="org/evals")
result = run_batch(config, run_one=run_one)
print("ran", result.ran, "pushed", result.pushed is not None)
"""


def _hub_rollout_ids(hub: FakeHub, repo: str) -> list[str]:
    ids: list[str] = []
    for path, data in hub.files(repo).items():
        if path.startswith("data/summary/") and path.endswith(".parquet"):
            ids += pq.read_table(io.BytesIO(data), columns=["rollout_id"]).column("rollout_id").to_pylist()
    return sorted(ids)


def test_batch_pushes_its_dataset_and_a_resume_adds_no_duplicates(tmp_path):
    out = tmp_path / "batch"
    with FakeHub(token=TOKEN) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE"))}
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "home"), HF_TOKEN=TOKEN,
                   HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1")
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), env.get("PYTHONPATH", "")])  # tests/support/
        runs = [subprocess.run([sys.executable, "-c", SCRIPT, str(out)], env=env, capture_output=True, text=True, timeout=240)
                for _ in range(2)]
        for proc in runs:
            assert proc.returncode == 0, proc.stderr[-3000:]
        assert "ran 2 pushed True" in runs[0].stdout and "ran 0 pushed True" in runs[1].stdout
        ids = _hub_rollout_ids(hub, "org/evals")
        assert "README.md" in hub.files("org/evals")
        local = sorted(p.name for p in (out / "rollouts").iterdir())
        assert ids == local  # both rollouts, once each, under the batch's rollout ids
        assert not any(TOKEN.encode() in blob for blob in hub.stored_bytes())
        for proc in runs:
            assert TOKEN not in proc.stdout + proc.stderr
    assert not any(TOKEN in p.read_text(errors="ignore") for p in out.rglob("*") if p.is_file() and p.suffix in {".json", ".jsonl", ".md"})
