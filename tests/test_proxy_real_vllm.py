"""Opt-in: the proxy in front of a genuine vLLM server (`REAL_VLLM_URL=http://127.0.0.1:18000/v1`,
see ../shared/tools/real-vllm). The harness sees what it would see directly; the trace holds vLLM's ids."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import openai
import pytest

from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.schema import schema_errors

REAL_VLLM_URL = os.environ.get("REAL_VLLM_URL")
pytestmark = [pytest.mark.real_vllm,
              pytest.mark.skipif(not REAL_VLLM_URL, reason="set REAL_VLLM_URL to a genuine vLLM server (.../v1)")]
VOLATILE = {"id", "created"}
MESSAGES = [{"role": "user", "content": "Say something."}]


def model_name() -> str:
    return httpx.get(REAL_VLLM_URL.rstrip("/") + "/models", timeout=30).json()["data"][0]["id"]


@pytest.mark.parametrize("stream", [False, True], ids=["non-streaming", "streaming"])
async def test_real_vllm_same_objects_and_server_ids_in_trace(tmp_path: Path, stream: bool):
    model = model_name()
    kwargs = {"model": model, "messages": MESSAGES, "max_tokens": 8, "seed": 3, "temperature": 1.0}
    async with CaptureProxy(upstream=REAL_VLLM_URL, trace_dir=tmp_path) as proxy:
        direct_client = openai.AsyncOpenAI(base_url=REAL_VLLM_URL, api_key="x", max_retries=0)
        proxy_client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
        if stream:
            opts = {"stream": True, "stream_options": {"include_usage": True}}
            direct = [c.model_dump(exclude=VOLATILE) async for c in
                      await direct_client.chat.completions.create(**kwargs, **opts)]
            proxied = [c.model_dump(exclude=VOLATILE) async for c in
                       await proxy_client.chat.completions.create(**kwargs, **opts)]
        else:
            direct = (await direct_client.chat.completions.create(**kwargs)).model_dump(exclude=VOLATILE)
            proxied = (await proxy_client.chat.completions.create(**kwargs)).model_dump(exclude=VOLATILE)
        assert proxied == direct
        truth = (await direct_client.chat.completions.create(
            **kwargs, logprobs=True, extra_body={"return_token_ids": True})).model_dump()
    (record,) = read_trace(proxy.trace_path())
    assert schema_errors(record, "trace_record") == []
    assert record["prompt_token_ids"] == truth["prompt_token_ids"]
    assert record["completion_token_ids"] == truth["choices"][0]["token_ids"]
    assert record["per_token_logps"] == pytest.approx([c["logprob"] for c in truth["choices"][0]["logprobs"]["content"]])
    assert record["capture_level"] == "tokens" and record["notes"] == []


@pytest.mark.parametrize("stream", [False, True], ids=["non-streaming", "streaming"])
async def test_real_vllm_completions_endpoint_is_unchanged_for_the_harness(tmp_path: Path, stream: bool):
    body = {"model": model_name(), "prompt": "hello", "max_tokens": 5, "seed": 1, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    async with CaptureProxy(upstream=REAL_VLLM_URL, trace_dir=tmp_path) as proxy:
        async with httpx.AsyncClient(timeout=60) as client:
            direct = await client.post(REAL_VLLM_URL.rstrip("/") + "/completions", json=body)
            proxied = await client.post(proxy.base_url + "/completions", json=body)

    def objects(resp: httpx.Response) -> list:
        texts = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")] if stream else [resp.text]
        out = [json.loads(t) if t != "[DONE]" else t for t in texts]
        for obj in out:
            if isinstance(obj, dict):
                obj.pop("id", None)
                obj.pop("created", None)
        return out

    assert objects(proxied) == objects(direct)
    (record,) = read_trace(proxy.trace_path())
    assert record["capture_level"] == "tokens" and len(record["completion_token_ids"]) == 5
    assert record["upstream_changes"] == {"return_token_ids": True, "logprobs": 0} and record["notes"] == []
