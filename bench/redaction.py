"""What secret handling costs per proxied call: body redaction, URL redaction, upstream credentials.

Measures, in microseconds per call (best of repeated runs, in-process, no network):

- `redact_body` of a typical agent request (system + 30 turns, tools, sampling fields), with and
  without a credential-named field to replace;
- `redact_url` of an upstream URL with userinfo and a query key (done once per error message);
- `AuthenticatingTransport` adding Basic auth and the upstream query to a request (every call),
  against a transport that answers at once.

    python bench/redaction.py [--calls 20000]

Prints a table and saves bench/results/redaction.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from pathlib import Path

import httpx

from rollout_dataset.proxy.redact import redact_body, redact_url
from rollout_dataset.proxy.upstream import AuthenticatingTransport, parse_upstream

RESULTS = Path(__file__).resolve().parent / "results" / "redaction.json"


def _request(with_secret: bool) -> dict:
    messages = [{"role": "system", "content": "You are a coding agent." * 20}]
    for i in range(30):
        messages.append({"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 40})
    tools = [{"type": "function", "function": {"name": f"tool{i}", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "keys": {"type": "array"}}}}} for i in range(6)]
    body = {"model": "m", "messages": messages, "tools": tools, "max_tokens": 512, "temperature": 1.0, "top_k": 20,
            "stream": True, "stream_options": {"include_usage": True}, "logprobs": True, "return_token_ids": True,
            "metadata": {"trace": "x", "nested": {"note": "n"}}}
    if with_secret:
        body["metadata"]["api_key"] = "sk-should-not-be-recorded"
    return body


def _per_call_us(fn, calls: int, repeats: int = 5) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return min(runs)  # best run: on a shared machine the noise only ever adds


class _Instant(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, request=request)


async def _transport_us(calls: int) -> tuple[float, float]:
    target = parse_upstream("http://user:pass@127.0.0.1:8000/v1?api_key=abcdef&api-version=2")
    plain, wrapped = _Instant(), AuthenticatingTransport(_Instant(), target)
    url = httpx.URL("http://127.0.0.1:8000/v1/chat/completions")

    async def run(transport: httpx.AsyncBaseTransport) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            request = httpx.Request("POST", url, headers=[(b"authorization", b"Bearer dummy")], content=b"{}")
            await transport.handle_async_request(request)
        return (time.perf_counter() - start) / calls * 1e6

    base, auth = [], []
    for _ in range(7):  # alternated, best run of each: the machine is shared, noise is one-sided
        base.append(await run(plain))
        auth.append(await run(wrapped))
    return min(base), min(auth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    clean, dirty = _request(False), _request(True)
    url = "http://user:pass@[::1]:8000/v1?api_key=abcdef&api-version=2"
    base, auth = asyncio.run(_transport_us(args.calls // 4))
    figures = {
        "redact_body_us_nothing_to_redact": _per_call_us(lambda: redact_body(clean), args.calls),
        "redact_body_us_one_field_redacted": _per_call_us(lambda: redact_body(dirty), args.calls),
        "redact_url_us": _per_call_us(lambda: redact_url(url), args.calls),
        "transport_us_plain": base,
        "transport_us_with_upstream_credentials": auth,
        "transport_added_us": auth - base,
    }
    doc = {"created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "calls": args.calls,
           "figures_us": {k: round(v, 2) for k, v in figures.items()}}
    for name, value in doc["figures_us"].items():
        print(f"{name:42s} {value:8.2f} us")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
