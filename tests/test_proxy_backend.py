"""Acceptance against the local backend: the openai SDK sees the same objects through the proxy,
and the trace holds the backend's own ids and logprobs."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.proxy import CaptureProxy, read_trace
from proxy_fakes import valid

SECRET = "sk-acceptance-9f8e7d6c5b4a-DISTINCT"
VOLATILE = {"id", "created"}  # differ between any two calls, proxy or not
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "count to three please"}]
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


@pytest.fixture
async def stack(tmp_path: Path):
    async with LocalBackend(policy="echo") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path / "traces") as proxy:
            yield backend, proxy


def sdk(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=SECRET, max_retries=0)


async def backend_truth(backend: LocalBackend, **body) -> dict:
    """The backend's own answer with ids and logprobs, asked directly."""
    async with httpx.AsyncClient() as client:
        payload = {"model": "local", "messages": MESSAGES, "seed": 7, **body, "return_token_ids": True,
                   "logprobs": True, "stream": False}
        return (await client.post(backend.base_url + "/chat/completions", json=payload)).json()


async def test_sdk_non_streaming_same_objects_and_trace_holds_backend_ids(stack, tmp_path: Path):
    backend, proxy = stack
    kwargs = {"model": "local", "messages": MESSAGES, "seed": 7, "max_tokens": 12, "temperature": 0.7}
    direct = await sdk(backend.base_url).chat.completions.create(**kwargs)
    proxied = await sdk(proxy.base_url).chat.completions.create(**kwargs)
    assert proxied.model_dump(exclude=VOLATILE) == direct.model_dump(exclude=VOLATILE)
    truth = await backend_truth(backend, max_tokens=12, temperature=0.7)
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["prompt_token_ids"] == truth["prompt_token_ids"]
    assert record["completion_token_ids"] == truth["choices"][0]["token_ids"]
    assert record["per_token_logps"] == [c["logprob"] for c in truth["choices"][0]["logprobs"]["content"]]
    assert record["capture_level"] == "tokens" and record["notes"] == []
    for path in (tmp_path / "traces").rglob("*"):
        assert SECRET.encode() not in path.read_bytes()


async def test_sdk_streaming_same_chunks_and_trace_holds_backend_ids(stack):
    backend, proxy = stack
    kwargs = {"model": "local", "messages": MESSAGES, "seed": 7, "max_tokens": 12, "stream": True,
              "stream_options": {"include_usage": True}}
    direct = [c.model_dump(exclude=VOLATILE) async for c in await sdk(backend.base_url).chat.completions.create(**kwargs)]
    proxied = [c.model_dump(exclude=VOLATILE) async for c in await sdk(proxy.base_url).chat.completions.create(**kwargs)]
    assert proxied == direct
    truth = await backend_truth(backend, max_tokens=12)
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["stream"] is True
    assert record["prompt_token_ids"] == truth["prompt_token_ids"]
    assert record["completion_token_ids"] == truth["choices"][0]["token_ids"]
    assert record["per_token_logps"] == [c["logprob"] for c in truth["choices"][0]["logprobs"]["content"]]
    assert record["response"]["choices"][0]["message"]["content"] == truth["choices"][0]["message"]["content"]
    assert record["notes"] == []


async def test_tool_call_round_trip_is_two_calls_with_prefix_continuity(tmp_path: Path):
    script = [{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}, "All done."]
    async with LocalBackend(policy="script", script=script) as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path) as proxy:
            client = sdk(proxy.session_base_url("tools"))
            messages = [{"role": "user", "content": "list the files"}]
            first = await client.chat.completions.create(model="local", messages=messages, tools=TOOLS)
            call = first.choices[0].message.tool_calls[0]
            assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "bash"
            messages += [first.choices[0].message.model_dump(exclude_none=True),
                         {"role": "tool", "tool_call_id": call.id, "content": "a.txt\nb.txt"}]
            stream = await client.chat.completions.create(model="local", messages=messages, tools=TOOLS, stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            assert text == "All done."
    one, two = valid(read_trace(proxy.trace_path("tools")))
    assert [one["index"], two["index"]] == [0, 1]
    assert one["finish_reason"] == "tool_calls" and two["finish_reason"] == "stop"
    assert one["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
    prefix = one["prompt_token_ids"] + one["completion_token_ids"]
    assert two["prompt_token_ids"][: len(prefix)] == prefix
