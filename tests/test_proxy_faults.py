"""Faults: each is recorded with its error, the harness gets a clear answer, and the proxy keeps serving."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from httpx_sse import aconnect_sse

from proxy_fakes import FakeVLLM, serve
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.schema import schema_errors

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def setup(tmp_path: Path):
    fake = FakeVLLM()
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces", upstream_timeout=0.5,
                                max_body_bytes=4096) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                yield fake, root, proxy, client


async def still_serving(client: httpx.AsyncClient, proxy: CaptureProxy) -> dict:
    """A good call after the fault: answered, and recorded whole; returns the fault's record."""
    ok = await client.post(proxy.base_url + "/chat/completions", json={"model": "ok", "messages": MESSAGES})
    assert ok.status_code == 200
    records = read_trace(proxy.trace_path())
    for record in records:
        assert schema_errors(record, "trace_record") == [], record
    assert records[-1]["error"] is None and records[-1]["capture_level"] == "tokens"
    assert len(records) == 2
    return records[0]


async def test_upstream_500_is_passed_through_as_is_and_recorded(setup):
    fake, root, proxy, client = setup
    body = {"model": "fail500", "messages": MESSAGES}
    direct = await client.post(root + "/v1/chat/completions", json=body)
    proxied = await client.post(proxy.base_url + "/chat/completions", json=body)
    assert proxied.status_code == 500 and proxied.content == direct.content
    assert proxied.headers["x-upstream"] == "yes"
    record = await still_serving(client, proxy)
    assert record["status"] == 500 and record["error"]["kind"] == "upstream_status"
    assert record["response"]["error"]["message"] == "engine dead" and record["capture_level"] == "none"


async def test_upstream_timeout_becomes_504_with_json_error(setup):
    fake, root, proxy, client = setup
    resp = await client.post(proxy.base_url + "/chat/completions", json={"model": "slow", "messages": MESSAGES})
    assert resp.status_code == 504
    assert "did not answer in time" in resp.json()["error"]["message"]
    record = await still_serving(client, proxy)
    assert record["status"] == 504 and record["error"]["kind"] == "upstream_timeout"


async def test_upstream_drop_mid_stream_records_partial_and_ends_client_stream(setup):
    fake, root, proxy, client = setup
    payload = {"model": "drop", "messages": MESSAGES, "stream": True}
    async with aconnect_sse(client, "POST", proxy.base_url + "/chat/completions", json=payload) as source:
        events = [json.loads(e.data) async for e in source.aiter_sse()]
    assert events[-1]["error"]["type"] == "upstream_disconnect"
    assert [e["choices"][0]["delta"].get("content") for e in events[1:-1]] == ["Hello", " there"]
    record = await still_serving(client, proxy)
    assert record["error"]["kind"] == "upstream_disconnect" and record["status"] == 200
    assert record["response"]["choices"][0]["message"]["content"] == "Hello there"
    assert len(record["completion_token_ids"]) == 2


async def test_client_disconnect_mid_stream_is_recorded(setup):
    fake, root, proxy, client = setup
    payload = {"model": "endless", "messages": MESSAGES, "stream": True}
    async with client.stream("POST", proxy.base_url + "/chat/completions", json=payload) as resp:
        got = b""
        async for chunk in resp.aiter_bytes():
            got += chunk
            if got.count(b"data:") >= 3:
                break
    for _ in range(200):
        if proxy.trace_path().exists():
            break
        await asyncio.sleep(0.02)
    record = await still_serving(client, proxy)
    assert record["error"]["kind"] == "client_disconnect" and record["status"] == 200
    assert record["response"]["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    ("content", "headers", "status", "needle"),
    [
        (b'{"model": "ok", "messages": [', {"content-type": "application/json"}, 400, "not valid JSON"),
        (b'[1, 2]', {"content-type": "application/json"}, 400, "must be a JSON object"),
        (b'model=ok', {"content-type": "application/x-www-form-urlencoded"}, 415, "expects content-type"),
        (b'{"model": "ok", "pad": "' + b"x" * 5000 + b'"}', {"content-type": "application/json"}, 413, "limit"),
    ],
    ids=["malformed-json", "not-an-object", "wrong-content-type", "oversized"],
)
async def test_bad_request_bodies_get_a_clear_4xx_and_are_recorded(setup, content, headers, status, needle):
    fake, root, proxy, client = setup
    resp = await client.post(proxy.base_url + "/chat/completions", content=content, headers=headers)
    assert resp.status_code == status and needle in resp.json()["error"]["message"]
    record = await still_serving(client, proxy)
    assert record["status"] == status and record["error"]["kind"] == "bad_request"
    assert fake.requests == [fake.requests[-1]]  # only the good call reached the upstream


async def test_unreachable_upstream_becomes_502(tmp_path: Path):
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    async with CaptureProxy(upstream=f"http://127.0.0.1:{port}/v1", trace_dir=tmp_path) as proxy:
        async with httpx.AsyncClient() as client:
            resp = await client.post(proxy.base_url + "/chat/completions", json={"model": "ok", "messages": []})
    assert resp.status_code == 502 and "could not reach" in resp.json()["error"]["message"]
    (record,) = read_trace(proxy.trace_path())
    assert record["error"]["kind"] == "upstream_unreachable" and schema_errors(record, "trace_record") == []


async def test_invalid_session_id_is_refused_and_recorded_in_default(setup):
    fake, root, proxy, client = setup
    resp = await client.post(proxy.root_url + "/sessions/..%2Fetc/v1/chat/completions",
                             json={"model": "ok", "messages": MESSAGES})
    assert resp.status_code == 400 and "invalid session id" in resp.json()["error"]["message"]
    record = await still_serving(client, proxy)
    assert record["error"]["kind"] == "bad_request"
