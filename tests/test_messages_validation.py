"""`/v1/messages` bodies off the published request shape get a 400 in Anthropic's error shape, are
recorded, and never reach the model; errors from upstream carry Anthropic's error types. Real proxy in
front of the local backend; the shape is one JSON Schema (`schema/schemas/messages_request.schema.json`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.proxy import CaptureProxy, read_trace

GOOD = {"model": "local", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}

BAD = {
    "system as a number": ({"system": 123}, "system"),
    "system as a list of numbers": ({"system": [1, 2]}, "system"),
    "system as an object": ({"system": {"text": "x"}}, "system"),
    "stream as a string": ({"stream": "yes"}, "stream"),
    "tool_choice as a bare string": ({"tool_choice": "auto"}, "tool_choice"),
    "thinking as a string": ({"thinking": "yes"}, "thinking"),
    "temperature NaN": ({"temperature": float("nan")}, "temperature"),
    "a tool_use whose input is a string": (
        {"messages": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": "ls"}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a"}]}]},
        "messages[1].content"),
    "an image block whose source is a string": (
        {"messages": [{"role": "user", "content": [{"type": "image", "source": "cat.png"}, {"type": "text", "text": "hi"}]}]},
        "messages[0].content"),
    "an image in a tool result whose source is a string": (
        {"messages": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                    "content": [{"type": "image", "source": "cat.png"}]}]}]},
        "messages[2].content"),
    "an unknown block type beside text": (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "hologram", "data": "x"}]}]},
        "messages[0].content"),
}


@pytest.fixture
async def proxy_url(tmp_path: Path):
    async with LocalBackend(policy="echo") as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path) as proxy:
            yield proxy, proxy.session_base_url("s").removesuffix("/v1") + "/v1/messages"


@pytest.mark.parametrize("case", list(BAD))
async def test_a_body_off_the_published_shape_is_an_anthropic_400_naming_the_field(proxy_url, case):
    proxy, url = proxy_url
    change, field = BAD[case]
    # json.dumps writes NaN as the bare token Python's (and the proxy's) JSON reader accepts
    content = json.dumps({**GOOD, **change}).encode()
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(url, content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].split(": ")[1].startswith(field), body
    records = read_trace(proxy.trace_path("s"))
    assert len(records) == 1 and records[0]["status"] == 400
    assert records[0]["prompt_token_ids"] is None  # nothing reached the model


async def test_an_upstream_error_passed_through_carries_anthropics_error_type(proxy_url):
    _, url = proxy_url
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(url, json={**GOOD, "max_tokens": 10_000_000})  # past the backend's context
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def _fuzzed_body(rng: random.Random) -> dict:
    values = [None, True, 0, -1, 1.5, "x", "", [], {}, [1], {"type": "text"}, {"type": "zzz"}, [{"type": "text", "text": 1}]]
    body = {**GOOD, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(["model", "max_tokens", "messages", "system", "stream", "temperature", "top_p", "top_k",
                          "stop_sequences", "tools", "tool_choice", "thinking", "metadata"])
        body[key] = rng.choice(values)
    if rng.random() < 0.3:
        body["messages"] = [{"role": rng.choice(["user", "assistant", "tool", 1]), "content": rng.choice(values)}]
    return body


async def test_hundreds_of_generated_bodies_get_no_server_error_and_are_all_recorded(proxy_url):
    proxy, url = proxy_url
    rng = random.Random(7)
    statuses = []
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(300):
            statuses.append((await client.post(url, json=_fuzzed_body(rng))).status_code)
        assert (await client.post(url, json=GOOD)).status_code == 200  # the proxy is alive
    assert all(status < 500 for status in statuses), sorted(set(statuses))
    records = read_trace(proxy.trace_path("s"))
    assert [record["status"] for record in records] == statuses + [200]  # every call recorded, as answered
