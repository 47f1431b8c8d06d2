"""Benchmark: what the recording proxy adds on `/v1/messages` (Anthropic Messages, sent upstream as chat
and translated back), beside the same figures for chat completions, measured in one run.

Starts the local backend and the recording proxy (`rollout-dataset proxy`, its own process) on loopback.
Per API, calls are interleaved target by target so machine load hits all alike:

* chat: `/v1/chat/completions` direct vs through the proxy;
* messages: the backend's native `/v1/messages` (no ids, as vLLM's) vs `/v1/messages` through the
  proxy (which asks the backend's chat endpoint for ids + logprobs and answers in the Messages format).

Figures: non-streaming latency at concurrency 1, added p50/p99 (proxy minus direct, same API); then
streaming (`--stream-tokens` per stream, concurrency 8): the proxy process's CPU (psutil, user +
system) per event the client received, per API.

Prints a markdown table and saves bench/results/messages_overhead.json.

    .venv/bin/python bench/messages_overhead.py [--calls 200] [--streams 64] [--stream-tokens 128]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import free_port, pct, start_backend, start_proxy  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "messages_overhead.json"
SYSTEM = "You are a helpful assistant."
USER = "Say hello in a few words."


def body(api: str, max_tokens: int, stream: bool) -> tuple[str, dict]:
    if api == "chat":
        return "/v1/chat/completions", {"model": "local", "max_tokens": max_tokens, "temperature": 0, "seed": 0,
                                        "stream": stream, "messages": [{"role": "system", "content": SYSTEM},
                                                                       {"role": "user", "content": USER}]}
    return "/v1/messages", {"model": "local", "max_tokens": max_tokens, "temperature": 0, "stream": stream,
                            "system": SYSTEM, "messages": [{"role": "user", "content": USER}]}


async def one(session: aiohttp.ClientSession, root: str, api: str, max_tokens: int, stream: bool) -> tuple[float, int]:
    """One call; returns (latency ms, events received)."""
    path, payload = body(api, max_tokens, stream)
    t0 = time.perf_counter()
    async with session.post(root + path, json=payload) as resp:
        resp.raise_for_status()
        if not stream:
            await resp.read()
            return (time.perf_counter() - t0) * 1000, 0
        events = 0
        async for line in resp.content:
            events += line.startswith(b"data:")
    return (time.perf_counter() - t0) * 1000, events


async def run(direct: str, proxied: str, proxy_pid: int, calls: int, streams: int, stream_tokens: int) -> dict:
    proc = psutil.Process(proxy_pid)
    out: dict = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        targets = {(api, where): root for api in ("chat", "messages")
                   for where, root in (("direct", direct), ("proxy", proxied))}
        for (api, _), root in targets.items():  # warm-up
            for _ in range(10):
                await one(session, root, api, 16, False)
        lat: dict = {key: [] for key in targets}
        for _ in range(calls):
            for key, root in targets.items():
                lat[key].append((await one(session, root, key[0], 16, False))[0])
        for api in ("chat", "messages"):
            d, p = lat[(api, "direct")], lat[(api, "proxy")]
            out[api] = {"direct_p50_ms": statistics.median(d), "proxy_p50_ms": statistics.median(p),
                        "added_p50_ms": statistics.median(p) - statistics.median(d),
                        "added_p99_ms": pct(p, 99) - pct(d, 99)}
        for api in ("chat", "messages"):
            cpu0 = proc.cpu_times()
            results = []
            for _ in range(max(1, streams // 8)):
                results += await asyncio.gather(*(one(session, proxied, api, stream_tokens, True) for _ in range(8)))
            cpu1 = proc.cpu_times()
            events = sum(n for _, n in results)
            spent = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
            out[api]["stream_events"] = events
            out[api]["proxy_cpu_us_per_event"] = spent / max(1, events) * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--stream-tokens", type=int, default=128)
    args = parser.parse_args()
    port = free_port()
    backend = start_backend(port)
    direct = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as traces:
        proxy, base = start_proxy(direct + "/v1", traces)
        try:
            figures = asyncio.run(run(direct, base.removesuffix("/v1"), proxy.pid, args.calls, args.streams,
                                      args.stream_tokens))
        finally:
            proxy.terminate()
            backend.terminate()
            proxy.wait(10)
            backend.wait(10)
    result = {"machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
              "args": vars(args), "figures": figures}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print("| API | direct p50 ms | proxy p50 ms | added p50 ms | added p99 ms | proxy CPU µs / streamed event |")
    print("| --- | --- | --- | --- | --- | --- |")
    for api, f in figures.items():
        print(f"| {api} | {f['direct_p50_ms']:.2f} | {f['proxy_p50_ms']:.2f} | {f['added_p50_ms']:.2f} | "
              f"{f['added_p99_ms']:.2f} | {f['proxy_cpu_us_per_event']:.0f} |")


if __name__ == "__main__":
    main()
