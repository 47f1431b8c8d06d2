"""The proxy's stream relay: events of one upstream read go to the harness in one write, parsed by
httpx-sse's public API only."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, AsyncIterator

import httpx

from rollout_dataset.proxy.app import ProxyApp
from rollout_dataset.proxy.recorder import TraceRecorder, read_trace

PACKAGE = Path(__file__).resolve().parent.parent / "rollout_dataset"


def _event(i: int) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None, "token_ids": [100 + i]}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class _Reads(httpx.AsyncByteStream):
    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for read in self.reads:
            yield read

    async def aclose(self) -> None:
        pass


class _Upstream(httpx.AsyncBaseTransport):
    """A model server whose stream arrives in the given reads."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=[(b"content-type", b"text/event-stream")], stream=_Reads(self.reads))


async def _stream_through(app: ProxyApp) -> list[bytes]:
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the harness stays connected
        return {"type": "http.disconnect"}

    writes: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            writes.append(message["body"])

    scope = {"type": "http", "method": "POST", "path": "/sessions/s1/v1/chat/completions", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    await app(scope, receive, send)
    return writes


def test_the_events_of_one_upstream_read_reach_the_harness_in_one_write(tmp_path: Path):
    # three reads: two whole events; one event split across the second and third read, with [DONE]
    third = _event(3)
    reads = [_event(0) + _event(1), _event(2) + third[:20], third[20:] + b"data: [DONE]\n\n"]
    app = ProxyApp("http://model.invalid", TraceRecorder(tmp_path), _Upstream(reads))
    writes = asyncio.run(_stream_through(app))
    assert len(writes) == 4  # one per read, then the held [DONE]
    assert writes[0].count(b"data: ") == 2 and writes[1].count(b"data: ") == 1 and writes[2].count(b"data: ") == 1
    assert writes[3] == b"data: [DONE]\n\n"
    assert b'"token_ids":[' not in b"".join(writes)  # the ids the proxy asked for are not the harness's
    (record,) = read_trace(tmp_path / "s1.jsonl")
    assert record["completion_token_ids"] == [100, 101, 102, 103]
    assert record["response"]["choices"][0]["message"]["content"] == "t0 t1 t2 t3 "


def test_the_proxy_uses_only_the_public_api_of_httpx_sse():
    private = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
               if re.search(r"\bhttpx_sse\._", path.read_text(encoding="utf-8"))]
    assert private == []
