"""`CaptureProxy(workers=N)` / `proxy --workers N`: worker processes on one port, one order, one file, one
chain per session, whichever worker takes a call; a worker killed with SIGKILL corrupts nothing.

The backend runs as `rollout-dataset serve` in its own process; the clients open a connection per call
(no keep-alive), so the kernel spreads the calls over the workers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from support.cli_servers import spawn_cli_server, stop_cli_server
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.app import WORKER_HEADER
from rollout_dataset.proxy.shared_recorder import SharedTraceRecorder
from rollout_dataset.schema import schema_errors


@pytest.fixture(scope="module")
def backend_url() -> Iterator[str]:
    proc, url = spawn_cli_server(["serve", "--port", "0", "--policy", "echo"])
    try:
        yield url
    finally:
        stop_cli_server(proc)


def _client() -> httpx.AsyncClient:
    # a new connection per call: each is accepted by whichever worker the kernel picks
    return httpx.AsyncClient(limits=httpx.Limits(max_connections=64, max_keepalive_connections=0), timeout=60)


async def _call(http: httpx.AsyncClient, proxy: CaptureProxy, session: str, tag: str, stream: bool) -> str:
    """One chat call; returns the pid of the worker that answered."""
    body = {"model": "local", "messages": [{"role": "user", "content": f"say {tag}"}], "max_tokens": 4,
            "stream": stream, "user": tag}
    response = await http.post(proxy.session_base_url(session) + "/chat/completions", json=body)
    response.raise_for_status()
    if stream:
        assert response.text.rstrip().endswith("data: [DONE]")
    return response.headers[WORKER_HEADER]


async def test_two_workers_keep_each_sessions_order_gap_free_its_chain_whole_and_every_record(backend_url, tmp_path):
    sessions, clients, calls = ["s0", "s1", "s2"], 6, 5
    async with CaptureProxy(upstream=backend_url, trace_dir=tmp_path, workers=2) as proxy, _client() as http:
        assert len(set(proxy.worker_pids)) == 2

        async def client(session: str, i: int) -> list[str]:
            return [await _call(http, proxy, session, f"{session}-{i}-{n}", stream=(i + n) % 2 == 0)
                    for n in range(calls)]

        pids = await asyncio.gather(*(client(s, i) for s in sessions for i in range(clients)))
        seals = {s: proxy.seal(s) for s in sessions}
        workers = set(proxy.worker_pids)
    served = [pid for per_client in pids for pid in per_client]
    assert {int(pid) for pid in served} == workers  # both workers answered calls
    for session in sessions:
        records = read_trace(tmp_path / f"{session}.jsonl", seal=seals[session])  # chain and seal hold
        assert len(records) == clients * calls == seals[session].records
        assert sorted(r["index"] for r in records) == list(range(clients * calls))  # one gap-free order
        assert sorted(r["request"]["user"] for r in records) == sorted(
            f"{session}-{i}-{n}" for i in range(clients) for n in range(calls))
        assert all(r["error"] is None and r["completion_token_ids"] for r in records)
        assert all(schema_errors(r, "trace_record") == [] for r in records[::7])


async def test_a_worker_killed_under_load_corrupts_no_file_and_the_others_serve_on(backend_url, tmp_path):
    completed: list[str] = []
    failed: list[str] = []
    async with CaptureProxy(upstream=backend_url, trace_dir=tmp_path, workers=2) as proxy, _client() as http:
        victim = proxy.worker_pids[0]
        stop = asyncio.Event()

        async def client(i: int) -> None:
            n = 0
            while not stop.is_set():
                tag = f"c{i}-{n}"
                n += 1
                try:
                    await _call(http, proxy, "load", tag, stream=True)
                except (httpx.HTTPError, AssertionError):
                    failed.append(tag)  # in flight on the killed worker
                    continue
                completed.append(tag)

        tasks = [asyncio.ensure_future(client(i)) for i in range(12)]
        while len(completed) < 60:
            await asyncio.sleep(0.01)
        os.kill(victim, signal.SIGKILL)
        at_kill = len(completed)
        while len(completed) < at_kill + 60:
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        seal = proxy.seal("load")
        # the pool looks for dead workers every WORKER_CHECK_S; 60 calls can finish before it first looks
        for _ in range(200):
            if victim not in proxy.worker_pids and len(proxy.worker_pids) == 2:
                break
            await asyncio.sleep(0.05)
        assert victim not in proxy.worker_pids and len(proxy.worker_pids) == 2  # replaced
    records = read_trace(tmp_path / "load.jsonl", seal=seal)  # every line whole, the chain unbroken
    recorded = [r["request"]["user"] for r in records]
    assert set(completed) <= set(recorded) and len(recorded) == len(set(recorded))
    indices = [r["index"] for r in records]
    assert len(indices) == len(set(indices))  # a reserved index is never handed out twice
    assert len(records) <= len(completed) + len(failed)


def test_an_append_cut_by_a_killed_worker_is_moved_aside_and_the_chain_continues(tmp_path: Path):
    one, other = SharedTraceRecorder(tmp_path), SharedTraceRecorder(tmp_path)
    for n in range(3):
        one.write("s", {"index": one.next_index("s"), "n": n, "notes": []})
    state_file = one.state_path("s")
    state = json.loads(state_file.read_bytes())
    # a worker saved its pending append, wrote part of the line, and was killed
    state["pending"] = {"size": state["size"] + 500, "head": "0" * 64}
    state_file.write_bytes(json.dumps(state).encode().ljust(4096))
    with open(one.path("s"), "ab") as f:
        f.write(b'{"index": 3, "n": "cut sh')
    other.write("s", {"index": other.next_index("s"), "n": 4, "notes": []})
    records = read_trace(one.path("s"), seal=one.seal("s"))
    assert [r["n"] for r in records] == [0, 1, 2, 4]
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    assert any("cut last line" in note for note in records[-1]["notes"])
    assert (tmp_path / "s.jsonl.cut-1").read_bytes() == b'{"index": 3, "n": "cut sh'


async def test_on_policy_mode_finds_each_calls_parent_whichever_worker_answered_it(backend_url, tmp_path):
    sessions, turns = [f"c{n}" for n in range(6)], 4
    async with CaptureProxy(upstream=backend_url, trace_dir=tmp_path, workers=2, on_policy=True) as proxy, \
            _client() as http:

        async def conversation(session: str) -> list[str]:
            messages, pids = [{"role": "user", "content": f"hello from {session}"}], []
            for turn in range(turns):
                response = await http.post(proxy.session_base_url(session) + "/chat/completions",
                                           json={"model": "local", "messages": messages, "max_tokens": 6})
                response.raise_for_status()
                pids.append(response.headers[WORKER_HEADER])
                messages = messages + [response.json()["choices"][0]["message"],
                                       {"role": "user", "content": f"and then {turn}?"}]
            return pids

        pids = dict(zip(sessions, await asyncio.gather(*(conversation(s) for s in sessions))))
        seals = {s: proxy.seal(s) for s in sessions}
    # the calls did move between workers (else this would test nothing)
    assert any(p[t] != p[t - 1] for p in pids.values() for t in range(1, turns))
    for session in sessions:
        records = sorted(read_trace(tmp_path / f"{session}.jsonl", seal=seals[session]), key=lambda r: r["index"])
        assert records[0]["continuity"]["reason"] == "new_conversation"
        for parent, child in zip(records, records[1:]):
            assert child["continuity"]["status"] == "exact", child["continuity"]
            assert child["continuity"]["parent_index"] == parent["index"]  # the latest turn, not an older one
            head = parent["prompt_token_ids"] + parent["completion_token_ids"]
            assert child["prompt_token_ids"][: len(head)] == head
