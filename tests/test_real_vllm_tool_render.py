"""Opt-in: the tool-render cases on a genuine vLLM 0.32 server serving the built-in tokenizer give
the prompt ids the local backend gives (and the recorded ids in tests/data/real_vllm_tool_render.json).

Set REAL_VLLM_TOOL_RENDER_URL to the root of a server started with vLLM's own CLI over the tiny model's
weights and this project's tokenizer (a folder holding only rollout_dataset/tokenizer_data's files, so
that transformers does not load it as a Qwen2 tokenizer, which splits digits):

    $REAL_VLLM_HOME/venv/bin/python -m vllm.entrypoints.openai.api_server --model $REAL_VLLM_HOME/model \\
        --tokenizer TOKENIZER_DIR --served-model-name tiny --port 18132 --max-model-len 4096 --dtype float32 \\
        --enable-auto-tool-choice --tool-call-parser hermes
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from tool_render_cases import MESSAGES_CASES, TOKENIZE_CASES

REAL = os.environ.get("REAL_VLLM_TOOL_RENDER_URL", "").rstrip("/").removesuffix("/v1")
pytestmark = [pytest.mark.real_vllm,
              pytest.mark.skipif(not REAL, reason="set REAL_VLLM_TOOL_RENDER_URL to compare with vLLM")]
RECORDED = json.loads((Path(__file__).parent / "data" / "real_vllm_tool_render.json").read_text())


@pytest.fixture
async def root():
    async with LocalBackend(served_model_name="tiny") as backend:
        yield backend.base_url.removesuffix("/v1")


@pytest.mark.parametrize("case", sorted(TOKENIZE_CASES))
async def test_tokenize_on_vllm_equals_the_backend_and_the_recording(root, case):
    async with httpx.AsyncClient(timeout=120) as client:
        genuine = await client.post(REAL + "/tokenize", json=TOKENIZE_CASES[case])
        local = await client.post(root + "/tokenize", json=TOKENIZE_CASES[case])
    assert genuine.status_code == local.status_code == RECORDED["tokenize"][case]["status"]
    assert genuine.json().get("tokens") == local.json().get("tokens") == RECORDED["tokenize"][case]["tokens"]


@pytest.mark.parametrize("case", sorted(MESSAGES_CASES))
async def test_messages_count_tokens_on_vllm_equals_the_backend(root, case):
    async with httpx.AsyncClient(timeout=120) as client:
        genuine = await client.post(REAL + "/v1/messages/count_tokens", json=MESSAGES_CASES[case])
        local = await client.post(root + "/v1/messages/count_tokens", json=MESSAGES_CASES[case])
    assert genuine.json()["input_tokens"] == local.json()["input_tokens"]
