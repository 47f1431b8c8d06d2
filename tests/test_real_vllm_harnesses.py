"""Opt-in, end to end against a genuine vLLM server: the built-in harness, mini-swe-agent, opencode and
Codex each complete a capture whose artifacts validate at capture level `tokens`, and the four build
into one dataset.

Set REAL_VLLM_URL (e.g. http://127.0.0.1:18000/v1, started by ../shared/tools/real-vllm/start.sh).
Rewards are 0 with random weights; what matters is that every call is recorded and trainable.
opencode's and Codex's own prompts are ~10k tokens: they need a server whose `max_model_len` holds
them (start.sh's 4096 does not: their first call ends the rollout as `context_exhausted`), so they are
skipped below 16384. `--max-tokens-cap 64` keeps random-weight answers short.
"""

from __future__ import annotations

import json
import os

import httpx
import pytest

from rollout_dataset.capture import capture_rollout
from rollout_dataset.recipes.coding import CaptureConfig
from rollout_dataset.harness import find_codex, find_mini, find_opencode
from rollout_dataset.schema.check import validate_path

REAL = os.environ.get("REAL_VLLM_URL", "").rstrip("/")
pytestmark = [pytest.mark.real_vllm, pytest.mark.harness,
              pytest.mark.skipif(not REAL, reason="set REAL_VLLM_URL to capture against vLLM")]

NEEDS = {"builtin": lambda: True, "mini-swe-agent": find_mini, "opencode": find_opencode, "codex": find_codex}
LONG_PROMPT = {"opencode", "codex"}


def _max_model_len() -> int:
    return httpx.get(REAL + "/models", timeout=30).json()["data"][0]["max_model_len"]


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    return {"root": tmp_path_factory.mktemp("real-harnesses")}


@pytest.mark.parametrize("harness", list(NEEDS))
def test_each_harness_completes_a_token_level_capture_on_vllm(captures, harness):
    if not NEEDS[harness]():
        pytest.skip(f"{harness} is not installed (make npm-tools / the test extra)")
    if harness in LONG_PROMPT and _max_model_len() < 16384:
        pytest.skip(f"{harness}'s own prompt does not fit max_model_len {_max_model_len()}: serve >= 16384")
    out = captures["root"] / harness
    result = capture_rollout(CaptureConfig(out_dir=out, base_url=REAL, harness=harness, task_index=0,
                                           timeout_s=400, max_turns=3, max_tokens_cap=64))
    assert validate_path(out) == [], result.validation_failures
    summary = result.summary
    assert summary["capture_level"] == "tokens" and summary["trainable"], summary
    assert summary["stop_reason"] != "context_exhausted"
    calls = json.loads((out / "trace.json").read_text())["calls"]
    assert [c["index"] for c in calls] == list(range(len(calls)))  # by arrival, even where calls overlapped
    generation = [c for c in calls if c["endpoint"] in ("/v1/chat/completions", "/v1/responses")]
    assert generation and all(c["capture_level"] == "tokens" and c["status"] == 200 for c in generation)
    assert all(c["effective_sampling_params"].get("max_tokens", c["effective_sampling_params"].get(
        "max_output_tokens")) <= 64 for c in generation)
    captures[harness] = out


def test_the_captured_rollouts_build_into_one_dataset(captures, tmp_path):
    from rollout_dataset.builder import build

    dirs = [path for name, path in captures.items() if name != "root"]
    if not dirs:
        pytest.skip("no capture ran")
    built = build(dirs, tmp_path / "dataset", progress=False)
    assert built is not None and (tmp_path / "dataset" / "README.md").exists()
