"""Several model servers behind one proxy (`proxy --upstream URL` repeated): sessions stick to one, new
ones go to the least loaded healthy one, an unhealthy one is left (and the move recorded), every record
names its model server, with one worker or two."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from httpx_sse import aconnect_sse

from proxy_fakes import FakeVLLM, serve
from support.cli_servers import spawn_cli_server, stop_cli_server
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.call import ServedBy
from rollout_dataset.proxy.upstream_pool import UpstreamLane, UpstreamPool, rendezvous_rank
from rollout_dataset.schema import schema_errors

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def two_backends() -> Iterator[list[str]]:
    procs = [spawn_cli_server(["serve", "--port", "0", "--policy", "echo"]) for _ in range(2)]
    try:
        yield [url for _, url in procs]
    finally:
        for proc, _ in procs:
            stop_cli_server(proc)


def _client() -> httpx.AsyncClient:
    # a new connection per call: with workers, each is accepted by whichever worker the kernel picks
    return httpx.AsyncClient(limits=httpx.Limits(max_connections=64, max_keepalive_connections=0), timeout=60)


async def _chat(http: httpx.AsyncClient, proxy: CaptureProxy, session: str, tag: str, stream: bool = False) -> int:
    body = {"model": "local", "messages": [{"role": "user", "content": f"say {tag}"}], "max_tokens": 4,
            "stream": stream}
    response = await http.post(proxy.session_base_url(session) + "/chat/completions", json=body)
    return response.status_code


def _servers(records: list[dict]) -> list[str]:
    return [r["model_server"]["url"] for r in records]


@pytest.mark.parametrize("workers", [1, 2])
async def test_each_session_sticks_to_one_model_server_and_sessions_spread_over_all(two_backends, tmp_path, workers):
    sessions = [f"s{i}" for i in range(8)]
    async with CaptureProxy(upstream=two_backends, trace_dir=tmp_path, workers=workers) as proxy, _client() as http:
        async def session_calls(session: str) -> list[int]:
            return [await _chat(http, proxy, session, f"{session}-{n}", stream=n % 2 == 0) for n in range(5)]

        statuses = await asyncio.gather(*(session_calls(s) for s in sessions))
        seals = {s: proxy.seal(s) for s in sessions}
    assert all(status == 200 for per_session in statuses for status in per_session)
    used: Counter[str] = Counter()
    for session in sessions:
        records = read_trace(tmp_path / f"{session}.jsonl", seal=seals[session])
        assert len(records) == 5 and all(schema_errors(r, "trace_record") == [] for r in records)
        servers = set(_servers(records))
        assert len(servers) == 1, (session, servers)  # sticky, whichever worker took each call
        assert all(r["model_server"]["moved_from"] is None for r in records)
        used[servers.pop()] += 1
    assert set(used) == {url.removesuffix("/v1") for url in two_backends} or set(used) == set(two_backends)


async def test_a_model_server_that_stops_answering_is_left_and_the_moved_session_says_so(tmp_path):
    proc, dying = spawn_cli_server(["serve", "--port", "0", "--policy", "echo"])
    other_proc, other = spawn_cli_server(["serve", "--port", "0", "--policy", "echo"])
    try:
        async with CaptureProxy(upstream=[dying, other], trace_dir=tmp_path) as proxy, _client() as http:
            # find a session that the pool places on the first server
            session = next(s for s in (f"r{i}" for i in range(100)) if rendezvous_rank(s, proxy.upstreams)[0] == 0)
            assert await _chat(http, proxy, session, "one") == 200
            stop_cli_server(proc)
            assert await _chat(http, proxy, session, "two") == 502  # unreachable: named and recorded
            assert await _chat(http, proxy, session, "three") == 200  # moved to the healthy one
            assert await _chat(http, proxy, "newcomer", "x") == 200
            status = proxy.upstream_status()
    finally:
        stop_cli_server(proc)
        stop_cli_server(other_proc)
    records = read_trace(tmp_path / f"{session}.jsonl")
    assert _servers(records) == [proxy.upstreams[0], proxy.upstreams[0], proxy.upstreams[1]]
    failed = records[1]
    assert failed["error"]["kind"] == "upstream_unreachable" and proxy.upstreams[0] in failed["error"]["message"]
    moved = records[2]["model_server"]
    assert moved["moved_from"] == proxy.upstreams[0] and moved["moved_because"]
    assert _servers(read_trace(tmp_path / "newcomer.jsonl")) == [proxy.upstreams[1]]
    assert [s["healthy"] for s in status] == [False, True]


async def test_the_health_check_marks_a_server_that_is_down_and_one_that_is_back(tmp_path):
    fake = FakeVLLM()
    async with serve(fake.app) as root:
        closed = "http://127.0.0.1:9"  # discard port: nothing listens there
        async with CaptureProxy(upstream=[closed, root], trace_dir=tmp_path) as proxy, _client() as http:
            status = await proxy.check_upstreams()
            assert [s["healthy"] for s in status] == [False, True] and "GET /v1/models" in status[0]["problem"]
            for i in range(6):  # no new session goes to the server that failed its check
                body = {"model": "ok", "messages": MESSAGES}
                response = await http.post(proxy.session_base_url(f"n{i}") + "/chat/completions", json=body)
                assert response.status_code == 200
    for i in range(6):
        assert _servers(read_trace(tmp_path / f"n{i}.jsonl")) == [root]


async def test_a_model_server_that_dies_mid_stream_leaves_a_failed_record_naming_it(tmp_path):
    fakes = [FakeVLLM(), FakeVLLM()]
    async with serve(fakes[0].app) as first, serve(fakes[1].app) as second:
        async with CaptureProxy(upstream=[first, second], trace_dir=tmp_path) as proxy, _client() as http:
            payload = {"model": "drop", "messages": MESSAGES, "stream": True}
            async with aconnect_sse(http, "POST", proxy.session_base_url("s") + "/chat/completions",
                                    json=payload) as source:
                events = [json.loads(e.data) async for e in source.aiter_sse()]
    assert events[-1]["error"]["type"] == "upstream_disconnect"
    (record,) = read_trace(tmp_path / "s.jsonl")
    assert schema_errors(record, "trace_record") == []
    assert record["error"]["kind"] == "upstream_disconnect"
    assert record["model_server"]["url"] in (first, second) and record["model_server"]["url"] in record["error"]["message"]
    assert record["response"]["choices"][0]["message"]["content"] == "Hello there"  # what came before the cut is kept


async def test_one_model_server_records_no_model_server_field(tmp_path):
    fake = FakeVLLM()
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path) as proxy, _client() as http:
            await http.post(proxy.base_url + "/chat/completions", json={"model": "ok", "messages": MESSAGES})
    (record,) = read_trace(tmp_path / "default.jsonl")
    assert "model_server" not in record


def _pool(n: int, placement_dir: Path | None = None) -> UpstreamPool:
    lanes = [UpstreamLane(i, f"http://10.0.0.{i}:8000", httpx.AsyncHTTPTransport(), None, None, None,  # type: ignore[arg-type]
                          f"http://10.0.0.{i}:8000") for i in range(n)]
    return UpstreamPool(lanes, placement_dir, check_health=False)


def test_a_new_session_goes_to_the_upstream_with_the_fewest_calls_in_flight():
    pool = _pool(3)
    pool.lanes[0].inflight, pool.lanes[1].inflight, pool.lanes[2].inflight = 5, 1, 3
    assert pool.place("fresh").index == 1
    pool.lanes[1].inflight = 9
    assert pool.place("fresh").index == 1  # sticky: its load no longer matters
    assert pool.place("another").index == 2


def test_workers_agree_on_a_sessions_upstream_through_the_placement_file(tmp_path):
    first, second = _pool(3, tmp_path), _pool(3, tmp_path)  # two workers' pools, no shared memory
    first.lanes[2].inflight = 0
    first.lanes[0].inflight = first.lanes[1].inflight = 4
    assert first.place("s").index == 2
    second.lanes[2].inflight = 50  # the second worker would pick another for a new session
    assert second.place("s").index == 2


def test_a_session_moves_once_to_the_ranked_first_healthy_upstream_and_not_back(tmp_path):
    pool = _pool(3, tmp_path)
    placed = pool.place("s").index
    pool.lanes[placed].mark(False, "GET /v1/models answered HTTP 503")
    moved = pool.place("s")
    ranked = [i for i in rendezvous_rank("s", pool.names) if i != placed]
    assert moved.index == ranked[0] and moved.moved_from == pool.names[placed]
    assert moved.moved_because == "GET /v1/models answered HTTP 503"
    pool.lanes[placed].mark(True)
    again = pool.place("s")
    assert again.index == moved.index and again.moved_from is None
    assert isinstance(again, ServedBy)


def test_a_capture_with_two_model_servers_names_the_one_that_served_each_call(tmp_path):
    from rollout_dataset.backend import run_backend_in_thread
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.recipes.coding import CaptureConfig
    from rollout_dataset.recipes.coding.policy import make_oracle
    from rollout_dataset.schema.check import validate_path
    from rollout_dataset.tokenizers import load_tokenizer

    tokenizer = load_tokenizer("builtin")
    with run_backend_in_thread(tokenizer=tokenizer, policy=make_oracle()) as first, \
            run_backend_in_thread(tokenizer=tokenizer, policy=make_oracle()) as second:
        result = capture_rollout(CaptureConfig(out_dir=tmp_path / "out", base_url=first.base_url, model="local",
                                               more_upstreams=(second.base_url,), tokenizer="builtin", timeout_s=60))
    assert result.ok, result.errors
    assert validate_path(result.out_dir) == []
    calls = [c for c in json.loads((result.out_dir / "trace.json").read_text())["calls"] if "model_server" in c]
    assert calls and len({c["model_server"]["url"] for c in calls}) == 1  # one rollout: one model server
    assert calls[0]["model_server"]["url"] in (first.base_url.removesuffix("/v1"), second.base_url.removesuffix("/v1"),
                                               first.base_url, second.base_url)


def test_more_model_servers_without_a_base_url_are_refused_naming_the_flags(tmp_path, capsys):
    from rollout_dataset.cli import main

    code = main(["batch", "--num-seeds", "1", "--rollouts-per-seed", "1", "--upstream", "http://127.0.0.1:9/v1",
                 "--no-progress", "--out", str(tmp_path / "b")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--upstream" in err and "--base-url" in err


async def test_on_policy_mode_finds_the_parent_after_a_session_moved_to_another_model_server(tmp_path):
    proc, dying = spawn_cli_server(["serve", "--port", "0", "--policy", "echo"])
    other_proc, other = spawn_cli_server(["serve", "--port", "0", "--policy", "echo"])
    try:
        async with CaptureProxy(upstream=[dying, other], trace_dir=tmp_path, on_policy=True) as proxy, \
                _client() as http:
            session = next(s for s in (f"c{i}" for i in range(100)) if rendezvous_rank(s, proxy.upstreams)[0] == 0)
            url = proxy.session_base_url(session) + "/chat/completions"
            messages = [{"role": "user", "content": "hello"}]
            first = await http.post(url, json={"model": "local", "messages": messages, "max_tokens": 6})
            messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "and then?"}]
            stop_cli_server(proc)
            assert (await http.post(url, json={"model": "local", "messages": messages, "max_tokens": 6})).status_code == 502
            moved = await http.post(url, json={"model": "local", "messages": messages, "max_tokens": 6})
            assert moved.status_code == 200
    finally:
        stop_cli_server(proc)
        stop_cli_server(other_proc)
    records = read_trace(tmp_path / f"{session}.jsonl")
    assert records[2]["model_server"]["moved_from"] == proxy.upstreams[0]
    assert records[2]["continuity"]["status"] == "exact" and records[2]["continuity"]["parent_index"] == 0


async def test_with_two_workers_a_session_leaves_a_dead_server_and_no_record_is_lost(tmp_path):
    proc, dying = spawn_cli_server(["serve", "--port", "0", "--policy", "echo"])
    other_proc, other = spawn_cli_server(["serve", "--port", "0", "--policy", "echo"])
    try:
        async with CaptureProxy(upstream=[dying, other], trace_dir=tmp_path, workers=2) as proxy, _client() as http:
            session = next(s for s in (f"w{i}" for i in range(100)) if rendezvous_rank(s, proxy.upstreams)[0] == 0)
            assert await _chat(http, proxy, session, "before") == 200
            stop_cli_server(proc)
            statuses = [await _chat(http, proxy, session, f"after-{n}") for n in range(10)]
            seal = proxy.seal(session)
    finally:
        stop_cli_server(proc)
        stop_cli_server(other_proc)
    records = sorted(read_trace(tmp_path / f"{session}.jsonl", seal=seal), key=lambda r: r["index"])
    assert len(records) == 11  # every call recorded, failed or not
    failed = [r for r in records[1:] if r["error"]]
    assert 1 <= len(failed) <= 2  # at most one per worker: each learns of the dead server by its own failed call
    assert all(r["error"]["kind"] == "upstream_unreachable" and r["model_server"]["url"] == proxy.upstreams[0]
               for r in failed)
    assert statuses[-1] == 200 and _servers(records[-3:]) == [proxy.upstreams[1]] * 3  # it stays on the new one
    assert any(r["model_server"]["moved_from"] == proxy.upstreams[0] for r in records)
    assert (tmp_path / ".proxy-state" / "upstreams" / session).read_text().split()[0] == "1"


async def test_the_proxy_command_takes_upstream_more_than_once(two_backends, tmp_path):
    args = ["proxy", "--trace-dir", str(tmp_path)] + [a for url in two_backends for a in ("--upstream", url)]
    proc, base = spawn_cli_server(args)
    try:
        async with _client() as http:
            for session in ("a", "b", "c", "d"):
                body = {"model": "local", "messages": MESSAGES, "max_tokens": 4}
                response = await http.post(base.removesuffix("/v1") + f"/sessions/{session}/v1/chat/completions",
                                            json=body)
                assert response.status_code == 200
    finally:
        stop_cli_server(proc)
    served = {session: _servers(read_trace(tmp_path / f"{session}.jsonl")) for session in ("a", "b", "c", "d")}
    assert all(len(urls) == 1 and urls[0] in two_backends for urls in served.values())
