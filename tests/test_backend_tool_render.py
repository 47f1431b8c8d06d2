"""The local backend renders a request's tools as vLLM 0.32 does: each tool validated into vLLM's
request model first (keys reordered, a missing description or parameters written as null, extra keys
dropped, lax booleans read), tool messages' text parts joined. Every expectation is the ids (or the
refusal) recorded from a genuine vLLM 0.32 server serving the built-in tokenizer for the same request
(tests/data/real_vllm_tool_render.json; tests/test_real_vllm_tool_render.py re-checks them live)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from tool_render_cases import MESSAGES_CASES, TOKENIZE_CASES

GENUINE = json.loads((Path(__file__).parent / "data" / "real_vllm_tool_render.json").read_text())


@pytest.fixture
async def root():
    async with LocalBackend(served_model_name="tiny") as backend:
        yield backend.base_url.removesuffix("/v1")


@pytest.mark.parametrize("case", sorted(TOKENIZE_CASES))
async def test_tokenize_gives_the_prompt_ids_or_refusal_of_genuine_vllm(root, case):
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(root + "/tokenize", json=TOKENIZE_CASES[case])
    genuine = GENUINE["tokenize"][case]
    assert answer.status_code == genuine["status"], answer.text
    assert answer.json().get("tokens") == genuine["tokens"]


@pytest.mark.parametrize("case", sorted(GENUINE["chat_prompt_token_ids"]))
async def test_chat_completion_prompt_ids_equal_genuine_vllms(root, case):
    body = {**TOKENIZE_CASES[case], "max_tokens": 1, "return_token_ids": True}
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(root + "/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["prompt_token_ids"] == GENUINE["chat_prompt_token_ids"][case]


@pytest.mark.parametrize("case", sorted(MESSAGES_CASES))
async def test_messages_tools_count_as_on_genuine_vllm(root, case):
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(root + "/v1/messages/count_tokens", json=MESSAGES_CASES[case])
    assert answer.status_code == GENUINE["count_tokens"][case]["status"], answer.text
    assert answer.json()["input_tokens"] == GENUINE["count_tokens"][case]["input_tokens"]


async def test_a_refused_tool_names_the_field_as_vllms_validation_does(root):
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(root + "/v1/chat/completions", json=TOKENIZE_CASES["no_name_refused"])
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "Bad Request" and "body.tools.0.function.name" in error["message"]
