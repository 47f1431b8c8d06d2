"""Context fitting and on-policy mode cover `/v1/messages` as they cover chat (the proxy sends a Messages
call upstream as chat, so both apply to that chat body), through the real proxy and the local backend."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.context_fit import CONTEXT_EXHAUSTED, ContextPolicy
from rollout_dataset.schema import schema_errors
from test_proxy_on_policy import CALL, extends, forced_steps

SMALL = 256
USER = [{"role": "user", "content": "count to three please"}]
TOOLS = [{"name": "bash", "description": "run a command", "input_schema": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]


def url(proxy: CaptureProxy, session: str | None = None) -> str:
    base = proxy.session_base_url(session) if session else proxy.base_url
    return base.removesuffix("/v1") + "/v1/messages?beta=true"


@pytest.fixture
async def small_backend():
    async with LocalBackend(policy="echo", max_model_len=SMALL) as backend:
        yield backend


async def test_max_tokens_is_lowered_to_the_room_left_and_recorded(small_backend, tmp_path: Path):
    async with httpx.AsyncClient() as client:
        counted = (await client.post(small_backend.root_url + "/tokenize",
                                     json={"model": "local", "messages": USER})).json()["count"]
    async with CaptureProxy(upstream=small_backend.base_url, trace_dir=tmp_path,
                            context=ContextPolicy(fit_context=True)) as proxy:
        async with httpx.AsyncClient() as client:
            r = await client.post(url(proxy), json={"model": "local", "max_tokens": 32000, "messages": USER,
                                                    "stream": True})
    assert r.status_code == 200 and "event: message_stop" in r.text
    (record,) = read_trace(proxy.trace_path())
    assert schema_errors(record, "trace_record") == []
    room = SMALL - counted
    assert record["upstream_changes"]["max_tokens"] == room
    assert record["requested_sampling_params"]["max_tokens"] == 32000
    assert record["effective_sampling_params"]["max_tokens"] == room
    assert record["upstream"]["request"]["max_completion_tokens"] == room
    assert record["capture_level"] == "tokens"


async def test_a_full_context_is_answered_as_context_exhausted(small_backend, tmp_path: Path):
    long = [{"role": "user", "content": "word " * (2 * SMALL)}]
    async with CaptureProxy(upstream=small_backend.base_url, trace_dir=tmp_path,
                            context=ContextPolicy(fit_context=True)) as proxy:
        async with httpx.AsyncClient() as client:
            r = await client.post(url(proxy), json={"model": "local", "max_tokens": 10, "messages": long})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    (record,) = read_trace(proxy.trace_path())
    assert schema_errors(record, "trace_record") == []
    assert record["error"]["kind"] == CONTEXT_EXHAUSTED


async def messages_agent(proxy: CaptureProxy) -> None:
    """Three Messages turns, as Claude Code keeps its history (content blocks, not ids)."""
    messages = [{"role": "user", "content": "List the files, then say what you saw."}]
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(3):
            body = {"model": "local", "max_tokens": 400, "system": "You are a careful agent.", "tools": TOOLS,
                    "messages": messages}
            r = await client.post(url(proxy, "s"), json=body)
            assert r.status_code == 200, r.text
            answer = r.json()
            messages = messages + [{"role": "assistant", "content": answer["content"]}]
            uses = [b for b in answer["content"] if b["type"] == "tool_use"]
            if uses:
                messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"],
                                                              "content": "a.py\nb.py"}]})
            else:
                messages.append({"role": "user", "content": "Thanks!"})


async def test_on_policy_splices_the_sampled_ids_into_the_next_messages_prompt(tmp_path, builtin_tokenizer):
    async with LocalBackend(policy="script", script=forced_steps(builtin_tokenizer)) as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=True) as proxy:
            await messages_agent(proxy)
            records = read_trace(proxy.trace_path("s"))
    for record in records:
        assert schema_errors(record, "trace_record") == [], record
    assert [r["continuity"]["status"] for r in records] == ["exact", "repaired", "repaired"]
    assert extends(records[0], records[1]) and extends(records[1], records[2])
    assert records[0]["response"]["content"][-1]["name"] == CALL["name"]
