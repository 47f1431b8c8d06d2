"""Latency and throughput of the local backend on loopback (a benchmark script, not a test).

    python bench/backend_latency.py [--calls 200] [--concurrency 32]

Prints a table and saves bench/results/backend_latency.json: p50/p99 latency of sequential
non-streaming and streaming chat calls (echo policy, return_token_ids + logprobs) on one kept-alive
connection, and requests per second at the given concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from pathlib import Path

import httpx

from rollout_dataset.backend import LocalBackend

MESSAGES = [{"role": "user", "content": "What files are in the current directory? Please list them."}]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _sequential(client: httpx.AsyncClient, calls: int, stream: bool) -> list[float]:
    out = []
    body = {"messages": MESSAGES, "return_token_ids": True, "logprobs": True, "stream": stream}
    for _ in range(calls):
        t = time.perf_counter()
        r = await client.post("/chat/completions", json=body)
        r.raise_for_status()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def _throughput(client: httpx.AsyncClient, calls: int, concurrency: int) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            (await client.post("/chat/completions", json={"messages": MESSAGES, "return_token_ids": True})).raise_for_status()

    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(calls)))
    return calls / (time.perf_counter() - t)


async def main(calls: int, concurrency: int) -> dict:
    async with LocalBackend() as backend:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=backend.base_url, limits=limits, timeout=60) as client:
            await _sequential(client, 5, False)  # warm up
            plain = await _sequential(client, calls, False)
            streamed = await _sequential(client, calls, True)
            rps = await _throughput(client, calls, concurrency)
    return {
        "calls": calls,
        "concurrency": concurrency,
        "non_stream_ms": {"p50": _pct(plain, 0.5), "p99": _pct(plain, 0.99)},
        "stream_ms": {"p50": _pct(streamed, 0.5), "p99": _pct(streamed, 0.99)},
        "throughput_rps": rps,
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    result = asyncio.run(main(args.calls, args.concurrency))
    print("| measure | value |\n| --- | ---: |")
    print(f"| non-streaming p50 / p99 | {result['non_stream_ms']['p50']:.2f} / {result['non_stream_ms']['p99']:.2f} ms |")
    print(f"| streaming p50 / p99 | {result['stream_ms']['p50']:.2f} / {result['stream_ms']['p99']:.2f} ms |")
    print(f"| throughput at concurrency {args.concurrency} | {result['throughput_rps']:.0f} req/s |")
    out = Path(__file__).resolve().parent / "results" / "backend_latency.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"saved {out}")
