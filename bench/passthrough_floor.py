"""A bench target: the recording proxy's own stack forwarding bytes, recording nothing (the floor).

The same server (uvicorn through `rollout_dataset.server_runner`, uvloop, httptools, TCP_NODELAY) and the
same upstream client (`rollout_dataset.proxy.transport.UpstreamTransport`) as `rollout-dataset
proxy`, with none of its work per call or per event: no parsing, no token fields, no stripping, no
reassembly, no record. Bodies go through as they come, one harness write per upstream read. What the
proxy costs above this target is what recording costs; this target's cost is what moving the bytes
costs on this machine, which no recording proxy built on this stack can go under.

    .venv/bin/python bench/passthrough_floor.py http://127.0.0.1:8000/v1   # prints its own base URL

`bench/proxy_overhead.py` starts it as the target "pass-through floor" (``--no-floor`` leaves it out).

``--least-recording`` serves the least work any recording proxy under this project's rules must do
on top of that, and nothing more: each generation request parsed and sent with the token fields
the proxy asks for; each answer parsed (a stream's events decoded by httpx-sse's public
`EventSource`, the one SSE decoder the package uses, then parsed by orjson), stripped of what the
harness did not ask for and re-encoded; one line per call appended to a file holding the request
and the answer as they came. No reassembly, token fields, digest chain, validation, redaction or
error handling. `bench/proxy_overhead.py` starts it as the target "least recording": its cost over
the floor bounds from below what recording can cost on this stack.

    .venv/bin/python bench/passthrough_floor.py --least-recording http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from contextlib import aclosing

import httpx
import orjson
from httpx_sse import EventSource

from rollout_dataset.proxy.stream_relay import _EventText  # the proxy's own read-at-a-time event text
from rollout_dataset.proxy.tokens import TokenRequest, prepare_request, strip_response
from rollout_dataset.proxy.transport import UpstreamTransport
from rollout_dataset.server_runner import UvicornServer, bind_socket, new_event_loop
from rollout_dataset.wire.sse import encode_event

# Hop-by-hop and framing headers: the transport and uvicorn set their own.
_DROP = {b"host", b"content-length", b"transfer-encoding", b"connection", b"keep-alive"}


async def _whole_body(receive) -> bytes:  # noqa: ANN001 - ASGI
    """The request body, every message of it."""
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


class PassThrough:
    """An ASGI app forwarding every call to `upstream_root` unchanged (the request whole, the answer as read)."""

    def __init__(self, upstream_root: str) -> None:
        self.upstream_root = upstream_root.rstrip("/")
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=256, keepalive_expiry=3)
        self.transport = UpstreamTransport(limits, verify=self.upstream_root.startswith("https:"))
        self.timeout = httpx.Timeout(600, connect=10).as_dict()

    def _upstream_request(self, scope, body: bytes) -> httpx.Request:  # noqa: ANN001 - ASGI
        """The harness's request, to the upstream as it came (hop-by-hop headers dropped), with `body`."""
        url = self.upstream_root + scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        headers = [(k, v) for k, v in scope["headers"] if k not in _DROP]
        return httpx.Request(scope["method"], url, headers=headers, stream=httpx.ByteStream(body),
                             extensions={"timeout": self.timeout})

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        if scope["type"] != "http":
            return
        body = await _whole_body(receive)
        request = self._upstream_request(scope, body)
        response = await self.transport.handle_async_request(request)
        out = [(k, v) for k, v in response.headers.raw if k.lower() not in _DROP]
        length = response.headers.get("content-length")
        if length is not None:
            out.append((b"content-length", length.encode()))
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        try:
            async for chunk in response.stream:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            await response.stream.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class LeastRecording(PassThrough):
    """The pass-through plus the least work a recording proxy must do (see the module's docstring)."""

    _GENERATION = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}

    def __init__(self, upstream_root: str) -> None:
        super().__init__(upstream_root)
        self.fd = os.open(os.path.join(tempfile.mkdtemp(prefix="least-recording-"), "calls.jsonl"),
                          os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        if scope["type"] != "http":
            return
        body = await _whole_body(receive)
        kind = self._GENERATION.get(scope["path"])
        parsed = orjson.loads(body) if kind else None
        token_req = prepare_request(kind, parsed, body) if kind else None
        request = self._upstream_request(scope, token_req.body if token_req else body)
        response = await self.transport.handle_async_request(request)
        out = [(k, v) for k, v in response.headers.raw if k.lower() not in _DROP]
        if token_req is not None and response.headers.get("content-type", "").startswith("text/event-stream"):
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            events = await self._events(response, token_req, send)
            answer = b"[" + b",".join(events) + b"]"
        else:
            answer = await response.aread()
            sent = answer
            if token_req is not None:
                edited = strip_response(orjson.loads(answer), token_req)
                sent = orjson.dumps(edited) if edited is not None else answer
            out.append((b"content-length", str(len(sent)).encode()))
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            await send({"type": "http.response.body", "body": sent, "more_body": True})
        os.write(self.fd, orjson.dumps({"request": orjson.Fragment(body), "response": orjson.Fragment(answer)})
                 + b"\n")
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _events(response: httpx.Response, token_req: TokenRequest, send) -> list[bytes]:  # noqa: ANN001
        """Each event decoded, parsed, stripped and re-encoded; one harness write per upstream read."""
        out: list[bytes] = []
        kept: list[bytes] = []

        async def flush() -> None:
            if out:
                data = b"".join(out)
                out.clear()
                await send({"type": "http.response.body", "body": data, "more_body": True})

        text = _EventText(response, "utf-8", True, flush)
        try:
            async with aclosing(EventSource(text).aiter_sse()) as events:
                async for event in events:
                    if event.data == "[DONE]":
                        out.append(encode_event(event.data))
                        continue
                    chunk = orjson.loads(event.data)
                    edited = strip_response(chunk, token_req)
                    data = orjson.dumps(edited) if edited is not None else event.data.encode()
                    kept.append(event.data.encode())
                    out.append(encode_event(data, event.event, event.id))
            await flush()
        finally:
            await response.aclose()
        return kept


async def _serve(upstream: str, least_recording: bool) -> None:
    sock = bind_socket("127.0.0.1", 0)
    server = UvicornServer((LeastRecording if least_recording else PassThrough)(upstream), sock)
    await server.start()
    print(f"http://127.0.0.1:{server.port}/v1", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main() -> None:
    """Serve the pass-through (or, with ``--least-recording``, the least recording) in front of the upstream URL."""
    args = sys.argv[1:]
    least_recording = "--least-recording" in args
    args = [a for a in args if a != "--least-recording"]
    if len(args) != 1:
        sys.exit("usage: passthrough_floor.py [--least-recording] UPSTREAM_BASE_URL (e.g. http://127.0.0.1:8000/v1)")
    upstream = args[0].rstrip("/")
    root = upstream[:-3] if upstream.endswith("/v1") else upstream
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(root, least_recording))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
