"""A bench target: the recording proxy's own stack forwarding bytes, recording nothing (the floor).

The same server (uvicorn through `rollout_dataset.server_runner`, uvloop, httptools, TCP_NODELAY) and the
same upstream client (`rollout_dataset.proxy.transport.UpstreamTransport`) as `rollout-dataset
proxy`, with none of its work per call or per event: no parsing, no token fields, no stripping, no
reassembly, no record. Bodies go through as they come, one harness write per upstream read. What the
proxy costs above this target is what recording costs; this target's cost is what moving the bytes
costs on this machine, which no recording proxy built on this stack can go under.

    .venv/bin/python bench/passthrough_floor.py http://127.0.0.1:8000/v1   # prints its own base URL

`bench/proxy_overhead.py` starts it as the target "pass-through floor" (``--no-floor`` leaves it out).
"""

from __future__ import annotations

import asyncio
import signal
import sys

import httpx

from rollout_dataset.proxy.transport import UpstreamTransport
from rollout_dataset.server_runner import UvicornServer, bind_socket, new_event_loop

# Hop-by-hop and framing headers: the transport and uvicorn set their own.
_DROP = {b"host", b"content-length", b"transfer-encoding", b"connection", b"keep-alive"}


class PassThrough:
    """An ASGI app forwarding every call to `upstream_root` unchanged (the request whole, the answer as read)."""

    def __init__(self, upstream_root: str) -> None:
        self.upstream_root = upstream_root.rstrip("/")
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=256, keepalive_expiry=3)
        self.transport = UpstreamTransport(limits, verify=self.upstream_root.startswith("https:"))
        self.timeout = httpx.Timeout(600, connect=10).as_dict()

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI
        if scope["type"] != "http":
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        url = self.upstream_root + scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        headers = [(k, v) for k, v in scope["headers"] if k not in _DROP]
        request = httpx.Request(scope["method"], url, headers=headers, stream=httpx.ByteStream(body),
                                extensions={"timeout": self.timeout})
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


async def _serve(upstream: str) -> None:
    sock = bind_socket("127.0.0.1", 0)
    server = UvicornServer(PassThrough(upstream), sock)
    await server.start()
    print(f"http://127.0.0.1:{server.port}/v1", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main() -> None:
    """Serve the pass-through in front of the upstream URL given as the only argument."""
    if len(sys.argv) != 2:
        sys.exit("usage: passthrough_floor.py UPSTREAM_BASE_URL (e.g. http://127.0.0.1:8000/v1)")
    upstream = sys.argv[1].rstrip("/")
    root = upstream[:-3] if upstream.endswith("/v1") else upstream
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(root))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
