"""In a batch, no agent can read the held-out tests that earlier rollouts wrote under `rollouts/`."""

from __future__ import annotations

import json

import pytest

from rollout_dataset.backend import make_policy, run_backend_in_thread
from rollout_dataset.tokenizers import load_tokenizer
from rollout_dataset.batch import BatchConfig, run_batch
from rollout_dataset.batch.runner import plan_jobs
from rollout_dataset.sandbox.isolation import probe_isolation

CONTROL_MARKER = "CONTROL-FILE-READABLE-2718"


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Two rollouts one after the other; each agent cats every held_out_tests.json under rollouts/."""
    base = tmp_path_factory.mktemp("batch-isolation")
    out = base / "batch"
    command = f"cat {out / 'rollouts'}/*/held_out_tests.json; echo; ls -a {out / 'rollouts'}; echo {CONTROL_MARKER}"
    policy = make_policy("script", steps=[{"name": "run", "arguments": {"command": command}},
                                          {"name": "submit", "arguments": {}}])
    tokenizer = load_tokenizer("builtin")
    with run_backend_in_thread(tokenizer=tokenizer, policy=policy, served_model_name="local") as backend:
        config = BatchConfig(out_dir=out, seeds=[0, 1], rollouts_per_seed=1, base_url=backend.base_url, model="local",
                             max_turns=3, concurrency=1, progress=False, build_dataset=False, timeout_s=120)
        run_batch(config)
    return out


def _run_outputs(folder) -> list[str]:
    trace = json.loads((folder / "trace.json").read_text())
    messages = trace["calls"][-1]["request"]["messages"]
    return [m["content"] for m in messages if m.get("role") == "tool"]


@pytest.mark.skipif(not probe_isolation().allow_list, reason="bubblewrap cannot build the allow-list root here")
def test_no_rollout_reads_any_held_out_tests_written_under_the_batch(batch):
    folders = sorted((batch / "rollouts").iterdir())
    assert len(folders) == 2
    held_out = [t for f in folders for t in json.loads((f / "held_out_tests.json").read_text())["tests"]]
    assert held_out, "the rollouts wrote real held-out tests"
    for folder in folders:
        output = _run_outputs(folder)[0]
        assert CONTROL_MARKER in output, "the command ran"
        assert "No such file" in output
        assert not any(json.dumps(t["input"]) in output for t in held_out)
        assert not any(f.name in output for f in folders), "the rollouts folder itself lists as empty"


def test_every_job_hides_the_rollouts_folder_of_its_batch(tmp_path):
    config = BatchConfig(out_dir=tmp_path / "b", seeds=[0, 3], rollouts_per_seed=2, progress=False)
    jobs = plan_jobs(config, "0" * 32)
    root = str((tmp_path / "b" / "rollouts").resolve())
    assert len(jobs) == 4
    for job in jobs:
        assert job.settings["hide_paths"] == [root] and job.artifact_dir.startswith(str(tmp_path / "b" / "rollouts"))


def test_a_batch_refuses_without_the_sandbox_and_runs_unsafe_only_when_asked(tmp_path, monkeypatch):
    from rollout_dataset.errors import SandboxUnavailableError

    monkeypatch.setenv("ROLLOUT_DATASET_SANDBOX_ISOLATION", "off")
    probe_isolation.cache_clear()
    try:
        common = dict(seeds=[0], rollouts_per_seed=1, max_turns=3, concurrency=1, progress=False,
                      build_dataset=False, timeout_s=120)
        with pytest.raises(SandboxUnavailableError, match="--unsafe-sandbox"):
            run_batch(BatchConfig(out_dir=tmp_path / "refused", **common))
        run_batch(BatchConfig(out_dir=tmp_path / "unsafe", unsafe_sandbox=True, **common))
    finally:
        monkeypatch.delenv("ROLLOUT_DATASET_SANDBOX_ISOLATION")
        probe_isolation.cache_clear()
    assert not (tmp_path / "refused" / "rollouts").exists() or not any((tmp_path / "refused" / "rollouts").iterdir())
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "unsafe" / "rollouts").glob("*/summary.json")]
    assert [s["isolation"] for s in summaries] == ["unsafe"] and summaries[0]["env_reward"] == 1.0
