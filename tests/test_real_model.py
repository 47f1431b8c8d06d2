"""Opt-in tier on genuine weights (`make test-real-model REAL_MODEL_URL=...`): SmolLM2-135M-Instruct on
vLLM's CPU build. Captures (built-in harness, mini-swe-agent, Crafter), builds, and audits with the
server's prompt_logprobs and with a transformers forward pass; also checks that the local backend's
`prompt_logprobs` has the genuine server's shape."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

pytestmark = pytest.mark.real_model
URL = os.environ.get("REAL_MODEL_URL")
MODEL_DIR = os.environ.get("REAL_MODEL_DIR", ".real-model/smollm2")
SCORER_PYTHON = os.environ.get("REAL_MODEL_PYTHON", ".venv-vllm/bin/python")
if not URL:
    pytest.skip("set REAL_MODEL_URL (make serve-real-model) to run the genuine-weights tier", allow_module_level=True)

CLI = [sys.executable, "-m", "rollout_dataset.cli"]
COMMON = ["--base-url", URL, "--model", "smollm2", "--tokenizer", MODEL_DIR, "--on-policy", "--no-push"]


def _ok(cmd, **kw):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def real_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    dirs = []
    for name, extra in (("builtin", ["--max-turns", "2", "--max-tokens", "96"]),
                        ("mini", ["--harness", "mini-swe-agent", "--max-tokens-cap", "96"]),
                        ("crafter", ["--env", "crafter", "--max-actions", "3", "--max-tokens", "64"])):
        _ok(CLI + ["capture", "--out-dir", str(root / name), *extra, *COMMON])
        dirs.append(root / name)
    _ok(CLI + ["build", *map(str, dirs), "--out", str(root / "ds")])
    return root / "ds"


def test_audit_against_the_server_agrees_on_genuine_weights(real_dataset):
    out = _ok(CLI + ["audit", str(real_dataset), "--against", URL, "--no-progress", "--max-mean-abs-diff", "1e-4"])
    assert "tokens scored by server" in out.stdout


def test_audit_with_transformers_agrees_on_genuine_weights(real_dataset):
    out = _ok([SCORER_PYTHON, "-m", "rollout_dataset.cli", "audit", str(real_dataset), "--model", MODEL_DIR,
               "--no-progress", "--no-write", "--max-mean-abs-diff", "1e-4"], env={**os.environ})
    assert "tokens scored by transformers" in out.stdout


def test_local_backend_prompt_logprobs_have_the_genuine_servers_shape():
    from rollout_dataset.backend import run_backend_in_thread

    body = {"prompt": [1, 504, 3458, 314], "max_tokens": 1, "prompt_logprobs": 1}
    real = httpx.post(f"{URL}/completions", json={"model": "smollm2", **body}, timeout=120).json()["choices"][0]
    with run_backend_in_thread(policy="echo") as b:
        local = httpx.post(f"{b.base_url}/completions", json={"prompt": [5, 6, 7, 8], "max_tokens": 1,
                                                               "prompt_logprobs": 1}).json()["choices"][0]
    assert list(real) == list(local)
    for plp in (real["prompt_logprobs"], local["prompt_logprobs"]):
        assert plp[0] is None and len(plp) == 4
        entry = next(iter(plp[1].values()))
        assert set(entry) == {"logprob", "rank", "decoded_token"}
