"""The proxy records token ids and logprobs while the harness sees what it would have seen directly."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from httpx_sse import aconnect_sse

from proxy_fakes import FakeVLLM, WORDS, logprob, prompt_ids, serve, word_id
from rollout_dataset.proxy import CaptureProxy, read_trace
from proxy_fakes import valid

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


@pytest.fixture
async def setup(tmp_path: Path):
    fake = FakeVLLM()
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root + "/v1", trace_dir=tmp_path / "traces", upstream_timeout=2.0) as proxy:
            async with httpx.AsyncClient(timeout=10) as client:
                yield fake, root, proxy, client


async def chat(client: httpx.AsyncClient, base: str, **body) -> httpx.Response:
    payload = {"model": "ok", "messages": MESSAGES, **body}
    return await client.post(base + "/chat/completions", json=payload)


async def stream_events(client: httpx.AsyncClient, base: str, **body) -> list[str]:
    payload = {"model": "ok", "messages": MESSAGES, "stream": True, **body}
    async with aconnect_sse(client, "POST", base + "/chat/completions", json=payload) as source:
        return [event.data async for event in source.aiter_sse()]


async def test_harness_not_asking_gets_nulls_while_trace_holds_ids_and_logprobs(setup):
    fake, root, proxy, client = setup
    direct = (await chat(client, root + "/v1")).json()
    proxied = (await chat(client, proxy.base_url)).json()
    assert proxied == direct
    assert proxied["prompt_token_ids"] is None and proxied["choices"][0]["token_ids"] is None
    assert proxied["choices"][0]["logprobs"] is None
    assert fake.requests[-1]["return_token_ids"] is True and fake.requests[-1]["logprobs"] is True
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["upstream_changes"] == {"return_token_ids": True, "logprobs": True}
    assert record["prompt_token_ids"] == prompt_ids({"messages": MESSAGES})
    assert record["completion_token_ids"] == [word_id(i, w) for i, w in enumerate(WORDS)]
    assert record["per_token_logps"] == [logprob(i) for i in range(len(WORDS))]
    assert record["capture_level"] == "tokens" and record["token_source"] == "return_token_ids"
    assert record["finish_reason"] == "stop" and record["notes"] == [] and record["error"] is None
    assert record["response"]["choices"][0]["token_ids"] == record["completion_token_ids"]
    assert record["request"]["messages"] == MESSAGES and "return_token_ids" not in record["request"]


async def test_harness_asking_for_everything_gets_upstream_bytes_unchanged(setup):
    fake, root, proxy, client = setup
    extra = {"return_token_ids": True, "logprobs": True, "top_logprobs": 0}
    direct = await chat(client, root + "/v1", **extra)
    proxied = await chat(client, proxy.base_url, **extra)
    assert proxied.content == direct.content
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["upstream_changes"] == {}
    assert record["requested_sampling_params"] == record["effective_sampling_params"]


async def test_stream_chunks_match_direct_and_record_is_reassembled(setup):
    fake, root, proxy, client = setup
    opts = {"stream_options": {"include_usage": True}}
    direct = await stream_events(client, root + "/v1", **opts)
    proxied = await stream_events(client, proxy.base_url, **opts)
    assert [json.loads(d) if d != "[DONE]" else d for d in proxied] == \
           [json.loads(d) if d != "[DONE]" else d for d in direct]
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["stream"] is True and record["status"] == 200 and record["ttft_ms"] is not None
    assert record["response"]["choices"][0]["message"]["content"] == "".join(WORDS)
    assert record["prompt_token_ids"] == prompt_ids({"messages": MESSAGES})
    assert record["completion_token_ids"] == [word_id(i, w) for i, w in enumerate(WORDS)]
    assert record["per_token_logps"] == [logprob(i) for i in range(len(WORDS))]
    assert record["usage"]["completion_tokens"] == len(WORDS) and record["notes"] == []


async def test_stream_tool_call_deltas_are_merged_by_index(setup):
    fake, root, proxy, client = setup
    await stream_events(client, proxy.base_url, model="tool")
    (record,) = valid(read_trace(proxy.trace_path()))
    (call,) = record["response"]["choices"][0]["message"]["tool_calls"]
    assert call == {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls -la"}'}}
    assert record["finish_reason"] == "tool_calls" and len(record["completion_token_ids"]) == 5


async def test_token_id_logprob_strings_are_a_second_id_source(setup):
    fake, root, proxy, client = setup
    body = (await chat(client, proxy.base_url, model="old")).json()
    assert body["choices"][0]["logprobs"] is None
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["token_source"] == "token_id_strings"
    assert record["completion_token_ids"] == [word_id(i, w) for i, w in enumerate(WORDS)]
    assert record["capture_level"] == "text"  # no prompt ids from this server


async def test_server_without_ids_is_recorded_at_text_level(setup):
    fake, root, proxy, client = setup
    await chat(client, proxy.base_url, model="plain")
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["capture_level"] == "text" and record["completion_token_ids"] is None
    assert record["prompt_token_ids"] is None and record["token_source"] is None


async def test_usage_disagreeing_with_ids_is_noted(setup):
    fake, root, proxy, client = setup
    await stream_events(client, proxy.base_url, model="badusage", stream_options={"include_usage": True})
    (record,) = valid(read_trace(proxy.trace_path()))
    assert any("usage.completion_tokens" in note for note in record["notes"])


async def test_completions_endpoint_gets_logprobs_zero_and_strips_them(setup):
    fake, root, proxy, client = setup
    payload = {"model": "ok", "prompt": "say hi", "max_tokens": 3}
    direct = (await client.post(root + "/v1/completions", json=payload)).json()
    proxied = (await client.post(proxy.base_url + "/completions", json=payload)).json()
    assert proxied == direct
    assert fake.requests[-1]["logprobs"] == 0
    (record,) = valid(read_trace(proxy.trace_path()))
    assert record["prompt_token_ids"] == prompt_ids({"prompt": "say hi"})
    assert record["completion_token_ids"] == [word_id(i, w) for i, w in enumerate(WORDS[:3])]
    assert record["per_token_logps"] == [logprob(i) for i in range(3)]


async def test_other_endpoints_pass_through_and_are_recorded(setup):
    fake, root, proxy, client = setup
    models = await client.get(proxy.base_url + "/models")
    assert models.json() == (await client.get(root + "/v1/models")).json()
    tok = await client.post(proxy.root_url + "/tokenize", json={"prompt": "abc"})
    assert tok.json()["tokens"] == prompt_ids({"prompt": "abc"})
    assert (await client.get(proxy.root_url + "/health")).status_code == 200
    records = valid(read_trace(proxy.trace_path()))
    assert [r["endpoint"] for r in records] == ["/v1/models", "/tokenize", "/health"]
    assert all(r["capture_level"] == "none" for r in records)
    assert records[1]["response"]["tokens"] == tok.json()["tokens"]


async def test_sessions_by_path_prefix_and_header_go_to_their_own_files(setup):
    fake, root, proxy, client = setup
    await chat(client, proxy.session_base_url("run-a"))
    await chat(client, proxy.session_base_url("run-a"))
    await client.post(proxy.base_url + "/chat/completions", headers={"x-rollout-session": "run-b",
                                                                     "x-session-id": "ses_42"},
                      json={"model": "ok", "messages": MESSAGES})
    a = valid(read_trace(proxy.trace_path("run-a")))
    b = valid(read_trace(proxy.trace_path("run-b")))
    assert [r["index"] for r in a] == [0, 1] and all(r["session"] == "run-a" for r in a)
    assert b[0]["session"] == "run-b" and b[0]["harness_session_id"] == "ses_42"
    assert b[0]["endpoint"] == "/v1/chat/completions"
    assert not proxy.trace_path().exists()


async def test_credentials_never_reach_the_trace(setup, tmp_path: Path):
    fake, root, proxy, client = setup
    secret = "sk-DISTINCTIVE-0123456789abcdef"
    headers = {"Authorization": f"Bearer {secret}", "api-key": secret, "x-api-key": secret,
               "cookie": f"session={secret}", "x-stainless-lang": "python"}
    await client.post(proxy.base_url + "/chat/completions", headers=headers,
                      json={"model": "ok", "messages": MESSAGES, "api_key": secret,
                            "metadata": {"access_token": secret, "note": "kept"}})
    await client.post(proxy.base_url + "/chat/completions", headers=headers,
                      json={"model": "ok", "messages": MESSAGES, "stream": True})
    assert fake.headers[-1]["authorization"] == f"Bearer {secret}"  # still forwarded upstream
    for path in (tmp_path / "traces").rglob("*"):
        assert secret.encode() not in path.read_bytes()
    record = read_trace(proxy.trace_path())[0]
    assert record["request_headers"]["x-stainless-lang"] == "python"
    assert record["request"]["api_key"] == "[REDACTED]" and record["request"]["metadata"]["note"] == "kept"


async def test_concurrent_calls_are_each_recorded_once_on_whole_lines(setup):
    import asyncio

    fake, root, proxy, client = setup
    results = await asyncio.gather(*(chat(client, proxy.base_url, stream=bool(i % 2), max_tokens=1 + i % 5)
                                     for i in range(40)))
    assert all(r.status_code == 200 for r in results)
    lines = proxy.trace_path().read_text().splitlines()
    records = valid([json.loads(line) for line in lines])
    assert sorted(r["index"] for r in records) == list(range(40))
    assert len({r["call_id"] for r in records}) == 40
    assert all(uuid.UUID(hex=r["call_id"]).version == 4 and uuid.UUID(hex=r["call_id"]).hex == r["call_id"]
               for r in records)  # "uuid4 hex", as the trace schema says


async def test_pretty_printed_request_still_makes_one_line_per_record(setup):
    fake, root, proxy, client = setup
    body = json.dumps({"model": "ok", "messages": MESSAGES}, indent=2).encode()
    resp = await client.post(proxy.base_url + "/chat/completions", content=body,
                             headers={"content-type": "application/json"})
    assert resp.status_code == 200
    await chat(client, proxy.base_url)
    lines = proxy.trace_path().read_bytes().split(b"\n")
    assert len(lines) == 3 and lines[-1] == b""
    first, second = valid([json.loads(line) for line in lines[:2]])
    assert first["request"] == second["request"] == {"model": "ok", "messages": MESSAGES}
    assert first["response"]["choices"][0]["token_ids"] == first["completion_token_ids"]
