"""`batch --push-every N` (rollout_dataset/batch/streaming.py): finished rollouts are pushed as the
batch goes; a batch killed (SIGKILL) after its k-th push resumes and publishes each rollout once
(loopback Hub, tests/hub_fixture.py)."""

from __future__ import annotations

import io
import os
from pathlib import Path
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from hub_fixture import FakeHub
from rollout_dataset.batch import BatchConfig
from rollout_dataset.builder import CONFIG_NAMES
from rollout_dataset.errors import ConfigError

TOKEN = "hf_streamPushTokenNeverLeaks0123456789"

# the batch runs in a subprocess (huggingface_hub reads HF_ENDPOINT at import); argv[2] = k kills the
# process with SIGKILL right after the k-th push landed (0: never), wrapping the push the streamer calls
SCRIPT = """
import os, signal, sys
import rollout_dataset.hub as publish
from rollout_dataset.batch import AchievementSnapshot, BatchConfig, result_from_artifacts, run_batch, write_achievements
from support.synthetic_dataset import write_synthetic_rollout

kill_after, pushes = int(sys.argv[2]), []
original = publish.push
def push_then_maybe_die(*a, **kw):
    result = original(*a, **kw)
    pushes.append(result)
    print("push", len(pushes), len(result.added), flush=True)
    if len(pushes) == kill_after:
        os.kill(os.getpid(), signal.SIGKILL)
    return result
publish.push = push_then_maybe_die

def run_one(job):
    write_synthetic_rollout(job.artifact_dir, n_turns=2, context_tokens=64, seed=job.seed, rollout_id=job.rollout_id)
    write_achievements(job.artifact_dir, env="coding", catalogue=["example_1"],
                       timeline=[AchievementSnapshot(1, frozenset({"example_1"}))])
    return result_from_artifacts(job.artifact_dir, replay=False)

config = BatchConfig(out_dir=sys.argv[1], seeds=[0, 1, 2, 3], rollouts_per_seed=1, progress=False, concurrency=1,
                     base_url="http://127.0.0.1:9/v1", strategies=("simple",), push_repo="org/stream", push_every=1)
result = run_batch(config, run_one=run_one)
print("ran", result.ran, "streamed", len(result.stream_pushes), "final", len(result.pushed.added))
"""


def _hub_ids(hub: FakeHub, repo: str, config: str) -> list[str]:
    ids: list[str] = []
    for path, data in hub.files(repo).items():
        if path.startswith(f"data/{config}/") and path.endswith(".parquet"):
            ids += pq.read_table(io.BytesIO(data), columns=["rollout_id"]).column("rollout_id").to_pylist()
    return sorted(ids)


def test_a_batch_killed_after_two_stream_pushes_resumes_and_publishes_each_rollout_once(tmp_path):
    out = tmp_path / "batch"
    with FakeHub(token=TOKEN) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PUSH_", "HUGGINGFACE"))}
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "home"), HF_TOKEN=TOKEN, HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HUB_DISABLE_PROGRESS_BARS="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1")
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), env.get("PYTHONPATH", "")])  # tests/support/
        killed = subprocess.run([sys.executable, "-c", SCRIPT, str(out), "2"], env=env, capture_output=True,
                                text=True, timeout=240)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        assert killed.stdout.split("\n")[:2] == ["push 1 1", "push 2 1"]
        assert len(_hub_ids(hub, "org/stream", "summary")) == 2  # what was pushed before the crash landed
        resumed = subprocess.run([sys.executable, "-c", SCRIPT, str(out), "0"], env=env, capture_output=True,
                                 text=True, timeout=240)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        # the 2 unfinished rollouts are run and streamed; the final push of dataset/ finds nothing new
        assert "ran 2 streamed 2 final 0" in resumed.stdout
        local = sorted(p.name for p in (out / "rollouts").iterdir())
        assert len(local) == 4
        for config in ("summary", "turns"):
            assert sorted(set(_hub_ids(hub, "org/stream", config))) == local, config
        assert _hub_ids(hub, "org/stream", "summary") == local  # once each
        for config in CONFIG_NAMES:  # in every config, each rollout's rows sit in exactly one shard
            shards_holding: dict[str, int] = {}
            for path, data in hub.files("org/stream").items():
                if path.startswith(f"data/{config}/") and path.endswith(".parquet"):
                    for rid in set(pq.read_table(io.BytesIO(data), columns=["rollout_id"])["rollout_id"].to_pylist()):
                        shards_holding[rid] = shards_holding.get(rid, 0) + 1
            assert all(n == 1 for n in shards_holding.values()), (config, shards_holding)
        assert not (out / ".push-staging").exists()


def test_push_every_needs_a_destination_and_a_non_negative_count(tmp_path):
    with pytest.raises(ConfigError, match="destination"):
        BatchConfig(out_dir=tmp_path, seeds=[0], push_every=2)
    with pytest.raises(ConfigError, match="push_every"):
        BatchConfig(out_dir=tmp_path, seeds=[0], push_every=-1, push_repo="org/x")
