"""Opt-in: `/v1/messages` through the proxy against a genuine vLLM server, key by key against vLLM's
native `/v1/messages` answer for the same request at temperature 0, streaming and not; and Claude Code
captured against it.

Set REAL_VLLM_URL (e.g. http://127.0.0.1:18300/v1, started by ../shared/tools/real-vllm/start.sh with
REAL_VLLM_MAX_LEN=32768 for Claude Code's long prompt).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from rollout_dataset.proxy import CaptureProxy, read_trace

REAL = os.environ.get("REAL_VLLM_URL", "").rstrip("/")
pytestmark = [pytest.mark.real_vllm, pytest.mark.skipif(not REAL, reason="set REAL_VLLM_URL to compare with vLLM")]

TOOLS = [{"name": "bash", "description": "Run a shell command.",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]
HISTORY = [{"role": "user", "content": "list the files"},
           {"role": "assistant", "content": [{"type": "text", "text": "Listing."},
                                             {"type": "tool_use", "id": "toolu_1", "name": "bash",
                                              "input": {"command": "ls"}}]},
           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py\nb.py"}]}]
CASES = {
    "plain": {"messages": [{"role": "user", "content": "say hello"}]},
    "system_blocks": {"system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1"},
                                 {"type": "text", "text": "You are terse."}],
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "say hello"}]}]},
    "tools_and_history": {"tools": TOOLS, "messages": HISTORY, "metadata": {"user_id": "u"}},
    "stop_sequences": {"messages": [{"role": "user", "content": "say hello"}], "stop_sequences": ["e"]},
}
ROOT = REAL.removesuffix("/v1")


def _body(case: str, stream: bool) -> dict:
    return {"model": "tiny", "max_tokens": 24, "temperature": 0, **CASES[case], "stream": stream}


def _events(text: str) -> list[dict]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        out.append(data)
    return out


def _without_volatile(value):
    """`id` and thinking signatures are random per answer (vLLM: uuid4)."""
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in ("id", "signature")}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


@pytest.fixture
async def proxy(tmp_path: Path):
    async with CaptureProxy(upstream=ROOT, trace_dir=tmp_path / "traces") as proxy:
        yield proxy


@pytest.mark.parametrize("case", sorted(CASES))
async def test_whole_answer_through_the_proxy_equals_vllms_native_messages_answer(proxy, case):
    async with httpx.AsyncClient(timeout=120) as client:
        native = (await client.post(ROOT + "/v1/messages", json=_body(case, False))).json()
        proxied = await client.post(proxy.base_url.removesuffix("/v1") + "/v1/messages?beta=true",
                                    json=_body(case, False))
    assert proxied.status_code == 200, proxied.text
    assert _without_volatile(proxied.json()) == _without_volatile(native)
    (record,) = read_trace(proxy.trace_path())
    assert record["capture_level"] == "tokens" and record["response"] == proxied.json()
    assert len(record["completion_token_ids"]) == len(record["per_token_logps"]) == native["usage"]["output_tokens"]
    assert len(record["prompt_token_ids"]) == native["usage"]["input_tokens"]


@pytest.mark.parametrize("case", sorted(CASES))
async def test_stream_through_the_proxy_equals_vllms_native_messages_events(proxy, case):
    async with httpx.AsyncClient(timeout=120) as client:
        native = _events((await client.post(ROOT + "/v1/messages", json=_body(case, True))).text)
        proxied = _events((await client.post(proxy.base_url.removesuffix("/v1") + "/v1/messages?beta=true",
                                             json=_body(case, True))).text)
    assert _without_volatile(proxied) == _without_volatile(native)
    (record,) = read_trace(proxy.trace_path())
    assert record["capture_level"] == "tokens" and record["stream"] is True
    assert len(record["completion_token_ids"]) == native[-2]["usage"]["output_tokens"]


async def test_count_tokens_through_the_proxy_equals_vllms(proxy):
    body = {"model": "tiny", **CASES["tools_and_history"]}
    async with httpx.AsyncClient(timeout=60) as client:
        native = (await client.post(ROOT + "/v1/messages/count_tokens", json=body)).json()
        proxied = (await client.post(proxy.base_url.removesuffix("/v1") + "/v1/messages/count_tokens", json=body)).json()
    assert proxied == native


def test_claude_code_captured_against_vllm_is_token_level(tmp_path):
    from rollout_dataset.capture import CaptureConfig, capture_rollout
    from rollout_dataset.harness.claude_code import find_claude_code

    if not find_claude_code():
        pytest.skip("Claude Code is not installed: run `make npm-tools`")
    result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", task_index=0, harness="claude-code",
                                           base_url=REAL, model="tiny", timeout_s=400, fit_context=True))
    calls = json.loads((result.out_dir / "trace.json").read_text())["calls"]
    generation = [c for c in calls if c["endpoint"] == "/v1/messages" and c["status"] == 200]
    assert generation, [(c["endpoint"], c["status"], c["error"]) for c in calls]
    assert all(c["capture_level"] == "tokens" and c["prompt_token_ids"] and c["completion_token_ids"]
               and c["per_token_logps"] for c in generation)
