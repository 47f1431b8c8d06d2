"""Load and crash: many concurrent streams each recorded once; a SIGKILLed proxy loses only calls in flight.

The backend runs as `rollout-dataset serve` in its own process (so the two cores share the work),
the clients are plain httpx + httpx-sse.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from httpx_sse import aconnect_sse

from support.cli_servers import spawn_cli_server, stop_cli_server
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.schema import schema_errors

BEARER = "Bearer sk-load-test-5a4b3c2d1e-UNIQUE"


@pytest.fixture(scope="module")
def backend_url() -> Iterator[str]:
    proc, url = spawn_cli_server(["serve", "--port", "0", "--policy", "echo"])
    try:
        yield url
    finally:
        stop_cli_server(proc)


async def truth_for(http: httpx.AsyncClient, base: str, content: str) -> dict:
    body = {"model": "local", "messages": [{"role": "user", "content": content}], "max_tokens": 3,
            "return_token_ids": True, "logprobs": True}
    return (await http.post(base + "/chat/completions", json=body)).json()


async def stream_call(http: httpx.AsyncClient, base: str, content: str, tag: str) -> str:
    body = {"model": "local", "messages": [{"role": "user", "content": content}], "max_tokens": 3, "seed": 1,
            "stream": True, "stream_options": {"include_usage": True}, "user": tag}
    parts = []
    async with aconnect_sse(http, "POST", base + "/chat/completions", json=body,
                            headers={"authorization": BEARER}) as source:
        source.response.raise_for_status()
        async for event in source.aiter_sse():
            if event.data == "[DONE]":
                continue
            chunk = json.loads(event.data)
            for choice in chunk["choices"]:
                assert choice.get("token_ids") is None and choice.get("logprobs") is None
                parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


async def test_64_concurrent_streaming_clients_x_20_calls_each_recorded_once(backend_url: str, tmp_path: Path):
    clients, calls = 64, 20
    async with CaptureProxy(upstream=backend_url, trace_dir=tmp_path) as proxy:
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=clients), timeout=120) as http:
            truths = [await truth_for(http, backend_url, f"client {i} says hi") for i in range(clients)]

            async def client(i: int) -> list[str]:
                return [await stream_call(http, proxy.base_url, f"client {i} says hi", f"c{i}-{n}")
                        for n in range(calls)]

            texts = await asyncio.gather(*(client(i) for i in range(clients)))
    for i, got in enumerate(texts):
        assert set(got) == {truths[i]["choices"][0]["message"]["content"]}
    data = proxy.trace_path().read_bytes()
    assert data.endswith(b"\n")
    records = [json.loads(line) for line in data.split(b"\n")[:-1]]  # every line parses
    assert len(records) == clients * calls
    assert sorted(r["request"]["user"] for r in records) == sorted(f"c{i}-{n}" for i in range(clients)
                                                                  for n in range(calls))
    assert sorted(r["index"] for r in records) == list(range(clients * calls))
    for record in records:
        truth = truths[int(record["request"]["user"][1:].split("-")[0])]
        assert record["prompt_token_ids"] == truth["prompt_token_ids"]
        assert record["completion_token_ids"] == truth["choices"][0]["token_ids"]
        assert record["per_token_logps"] == [c["logprob"] for c in truth["choices"][0]["logprobs"]["content"]]
        assert record["error"] is None and record["notes"] == []
    for record in records[:: max(1, len(records) // 40)]:
        assert schema_errors(record, "trace_record") == []
    assert BEARER.split()[1].encode() not in data


async def test_sigkill_under_load_keeps_every_completed_call(backend_url: str, tmp_path: Path):
    trace_dir = tmp_path / "traces"
    proc, proxy_url = spawn_cli_server(["proxy", "--upstream", backend_url, "--trace-dir", str(trace_dir)])
    completed: list[str] = []
    try:
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=16), timeout=30) as http:

            async def client(i: int) -> None:
                for n in range(10_000):
                    tag = f"c{i}-{n}"
                    try:
                        await stream_call(http, proxy_url, f"crash client {i}", tag)
                    except (httpx.HTTPError, json.JSONDecodeError):
                        return  # the proxy is gone
                    completed.append(tag)

            tasks = [asyncio.ensure_future(client(i)) for i in range(16)]
            while len(completed) < 150:
                await asyncio.sleep(0.01)
                assert not all(t.done() for t in tasks), "clients stopped before the kill"
            proc.send_signal(signal.SIGKILL)
            done_at_kill = list(completed)
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    records = read_trace(trace_dir / "default.jsonl")  # raises if any line but a cut-off last one is corrupt
    recorded = {r["request"]["user"] for r in records}
    assert set(done_at_kill) <= recorded
    assert set(completed) <= recorded  # even calls whose end the clients saw after the kill signal
    assert len(records) >= len(completed)
    assert all(r["completion_token_ids"] for r in records if r["request"]["user"] in set(completed))
    for path in trace_dir.rglob("*"):
        assert BEARER.split()[1].encode() not in path.read_bytes()
