"""The session API under bad input: each case a clear 4xx (or recorded), nothing of another session
leaked, no record lost (docs/session-api.md, "Refusals")."""

from __future__ import annotations

import asyncio
import http.client
import json
from pathlib import Path

import httpx
import pytest

from proxy_fakes import FakeVLLM, serve
from rollout_dataset.errors import SessionApiError
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.server import session_api_mode
from rollout_dataset.session_client import AsyncSessionClient
from rollout_dataset.trace_integrity import TraceSeal

SECRET_TEXT = "the other session's words"


def chat(text: str = "hi", model: str = "ok", stream: bool = False) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}


async def raw(proxy: CaptureProxy, method: str, path: str, body: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, dict]:
    """A request sent with its path exactly as given (httpx would normalise ``..``)."""
    def send() -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            answer = connection.getresponse()
            data = answer.read()
        finally:
            connection.close()
        return answer.status, json.loads(data) if data else {}
    return await asyncio.to_thread(send)


@pytest.fixture
async def upstream():
    async with serve(FakeVLLM().app) as root:
        yield root


async def two_sessions(proxy: CaptureProxy) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        for session, text in (("mine", "hello"), ("theirs", SECRET_TEXT)):
            r = await client.post(proxy.session_base_url(session) + "/chat/completions", json=chat(text))
            assert r.status_code == 200


async def test_an_unknown_or_foreign_session_is_a_404_naming_only_that_id(tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "a", session_api=True) as other:
        async with httpx.AsyncClient(timeout=30) as client:
            await client.post(other.session_base_url("foreign") + "/chat/completions", json=chat(SECRET_TEXT))
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "b", session_api=True) as proxy:
        await two_sessions(proxy)
        for path in ("/sessions/foreign", "/sessions/nobody/sequences", "/sessions/foreign/seal"):
            method = "POST" if path.endswith("seal") else "GET"
            status, body = await raw(proxy, method, path)
            assert status == 404 and body["error"]["code"] == "unknown_session", path
            assert SECRET_TEXT not in json.dumps(body)
        status, mine = await raw(proxy, "GET", "/sessions/mine/sequences")
        assert status == 200 and SECRET_TEXT not in json.dumps(mine)
        status, document = await raw(proxy, "GET", "/sessions/mine")
        assert status == 200 and SECRET_TEXT not in json.dumps(document) and document["settled_calls"] == 1


@pytest.mark.parametrize("path", [
    "/sessions/../sequences", "/sessions/..%2F..%2Fetc%2Fpasswd/sequences", "/sessions/%2e%2e/sequences",
    "/sessions/.sessions", "/sessions/mine%00/sequences", "/sessions/-x/sequences", "/sessions/" + "a" * 200,
])
async def test_a_path_that_would_leave_the_trace_folder_is_refused(tmp_path, upstream, path):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        await two_sessions(proxy)
        status, body = await raw(proxy, "GET", path)
        assert 400 <= status < 500, (status, body)
        assert "root:" not in json.dumps(body) and SECRET_TEXT not in json.dumps(body)
        status, listed = await raw(proxy, "GET", "/sessions")
        assert sorted(s["session"] for s in listed["sessions"]) == ["default", "mine", "theirs"] or \
            sorted(s["session"] for s in listed["sessions"]) == ["mine", "theirs"]


async def test_a_read_while_a_call_streams_answers_the_settled_calls_and_says_one_is_in_flight(tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        url = proxy.session_base_url("s") + "/chat/completions"
        async with httpx.AsyncClient(timeout=30) as client, AsyncSessionClient(proxy.base_url) as api:
            assert (await client.post(url, json=chat())).status_code == 200
            async with client.stream("POST", url, json=chat(model="endless", stream=True)) as stream:
                chunks = stream.aiter_raw()
                await chunks.__anext__()  # the stream has started (the iterator kept: the stream stays open)
                during = await api.sequences("s")
                with pytest.raises(SessionApiError) as refused:
                    await api.seal("s")
            for _ in range(200):  # the harness left: the proxy records the cut stream
                after = await api.session("s")
                if after["calls_in_flight"] == 0:
                    break
                await asyncio.sleep(0.05)
    assert during["calls_in_flight"] == 1 and during["settled_calls"] == 1
    assert [s["node_ids"] for s in during["sequences"]] == [[0]]
    assert refused.value.status == 409 and refused.value.code == "call_in_flight"
    assert after["calls_in_flight"] == 0 and after["settled_calls"] == 2
    assert after["calls"][1]["error"] == "client_disconnect"


async def test_a_sealed_session_takes_no_reward_and_no_call_and_its_file_stays_as_sealed(tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        await two_sessions(proxy)
        async with AsyncSessionClient(proxy.base_url) as api, httpx.AsyncClient(timeout=30) as client:
            await api.post_reward("mine", 0.5)
            with pytest.raises(SessionApiError) as twice:
                await api.post_reward("mine", 0.6)
            sealed = (await api.seal("mine"))["seal"]
            with pytest.raises(SessionApiError) as late:
                await api.post_reward("mine", 1.0)
            with pytest.raises(SessionApiError) as again:
                await api.seal("mine")
            refused = await client.post(proxy.session_base_url("mine") + "/chat/completions", json=chat())
            document = await api.session("mine")
        default = read_trace(proxy.trace_path("default"))
    assert twice.value.code == "reward_exists" and late.value.status == 409 and late.value.code == "session_sealed"
    assert again.value.code == "session_sealed"
    assert refused.status_code == 409 and "sealed" in refused.json()["error"]["message"]
    assert [r["status"] for r in default] == [409] and default[0]["error"]["kind"] == "bad_request"
    assert document["reward"] == 0.5 and document["settled_calls"] == 1
    records = read_trace(tmp_path / "t" / "mine.jsonl", seal=TraceSeal(sealed["records"], sealed["head_sha256"]))
    assert len(records) == 1


async def test_a_session_sealed_before_a_restart_refuses_calls_and_one_sealed_after_its_calls_refuses_the_next(
        tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        await two_sessions(proxy)
        async with AsyncSessionClient(proxy.base_url) as api:
            await api.seal("mine")
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        async with httpx.AsyncClient(timeout=30) as client, AsyncSessionClient(proxy.base_url) as api:
            before_restart = [(await client.post(proxy.session_base_url("mine") + "/chat/completions",
                                                 json=chat())).status_code for _ in range(2)]
            open_calls = [(await client.post(proxy.session_base_url("theirs") + "/chat/completions",
                                             json=chat())).status_code for _ in range(2)]
            await api.seal("theirs")  # a session this process saw open, sealed here
            after_seal = (await client.post(proxy.session_base_url("theirs") + "/chat/completions",
                                            json=chat())).status_code
    assert before_restart == [409, 409] and open_calls == [200, 200] and after_seal == 409
    assert len(read_trace(tmp_path / "t" / "theirs.jsonl")) == 3


@pytest.mark.parametrize("body, why", [
    (b'{"reward": NaN}', "NaN"), (b'{"reward": Infinity}', "Infinity"), (b'{"reward": -Infinity}', "Infinity"),
    (b'{"reward": 1e999}', "finite"), (b'{"reward": 1' + b"0" * 400 + b"}", "finite"),
    (b'{"reward": "1"}', "number"), (b'{"reward": true}', "number"), (b'{"metadata": {}}', "number"),
    (b'{"reward": 1, "metadata": [1]}', "metadata"), (b'{"reward": 1, "metadata": {"x": NaN}}', "NaN"),
    (b'{"reward": 1, "extra": 2}', "unknown field"), (b"[1]", "object"), (b"not json", "JSON"),
    (b"[" * 10_000 + b"]" * 10_000, "deep"),
])
async def test_a_reward_that_is_not_a_finite_number_is_a_400(tmp_path, upstream, body, why):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        await two_sessions(proxy)
        status, answer = await raw(proxy, "POST", "/sessions/mine/reward", body,
                                   {"content-type": "application/json"})
        _, document = await raw(proxy, "GET", "/sessions/mine")
    assert status == 400 and answer["error"]["code"] == "invalid_reward", answer
    assert why in answer["error"]["message"]
    assert document["reward"] is None


async def test_a_huge_reward_body_is_a_413_and_not_kept(tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        await two_sessions(proxy)
        body = json.dumps({"reward": 1, "metadata": {"blob": "x" * 8_000_000}}).encode()
        status, answer = await raw(proxy, "POST", "/sessions/mine/reward", body)
        _, document = await raw(proxy, "GET", "/sessions/mine")
    assert status == 413 and answer["error"]["code"] == "body_too_large"
    assert document["reward"] is None


async def test_a_wrong_or_missing_token_is_a_401_and_the_model_endpoints_need_none(tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True,
                            session_api_token="s3cret") as proxy:
        await two_sessions(proxy)
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"},
                        {"authorization": "Basic s3cret"}, {"authorization": "Bearer s3cret2"}):
            for method, path in (("GET", "/sessions"), ("GET", "/sessions/mine/sequences"),
                                 ("POST", "/sessions/mine/seal")):
                status, answer = await raw(proxy, method, path, headers=headers)
                assert status == 401 and answer["error"]["code"] == "unauthorized", (headers, path)
                assert SECRET_TEXT not in json.dumps(answer)
        status, listed = await raw(proxy, "GET", "/sessions", headers={"authorization": "Bearer s3cret"})
    assert status == 200 and {s["session"] for s in listed["sessions"]} == {"mine", "theirs"}
    assert not (tmp_path / "t" / ".sessions" / "mine.seal.json").exists()


def test_beyond_loopback_the_api_is_off_without_a_token():
    assert session_api_mode(None, "0.0.0.0", None)[0] is False
    assert "token" in session_api_mode(None, "0.0.0.0", None)[1]
    assert session_api_mode(None, "0.0.0.0", "t") == (True, "")
    assert session_api_mode(None, "127.0.0.1", None) == (True, "")
    assert session_api_mode(None, "::1", None) == (True, "")
    with pytest.raises(ValueError, match="token"):
        session_api_mode(True, "192.168.1.5", None)
    assert session_api_mode(False, "127.0.0.1", None)[0] is False
    with pytest.raises(ValueError, match="off"):
        session_api_mode(False, "127.0.0.1", "t")


async def test_an_api_that_is_off_answers_404_saying_so_and_forwards_nothing(tmp_path):
    fake = FakeVLLM()
    async with serve(fake.app) as root:
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "t") as proxy:
            status, answer = await raw(proxy, "GET", "/sessions")
    assert status == 404 and answer["error"]["code"] == "session_api_off"
    assert not list((tmp_path / "t").glob("*.jsonl"))


async def test_the_default_session_cannot_be_sealed_and_a_wrong_method_is_a_405(tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        async with httpx.AsyncClient(timeout=30) as client:
            await client.post(proxy.base_url + "/chat/completions", json=chat())
        status, answer = await raw(proxy, "POST", "/sessions/default/seal")
        wrong, allowed = await raw(proxy, "DELETE", "/sessions/default")
        posted, _ = await raw(proxy, "GET", "/sessions/default/reward")
    assert status == 400 and answer["error"]["code"] == "default_session"
    assert wrong == 405 and allowed["error"]["code"] == "method_not_allowed" and posted == 405


async def test_a_trace_file_edited_after_its_seal_is_a_500_naming_it(tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        await two_sessions(proxy)
        async with AsyncSessionClient(proxy.base_url) as api:
            await api.seal("mine")
            path = Path(tmp_path / "t" / "mine.jsonl")
            path.write_bytes(path.read_bytes().replace(b'"hello"', b'"HELLO"'))
            with pytest.raises(SessionApiError) as broken:
                await api.sequences("mine")
    assert broken.value.status == 500 and broken.value.code == "trace_unreadable"
    assert "mine.jsonl" in str(broken.value)


async def test_no_record_is_lost_while_the_api_is_read_and_written_under_load(tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        async with httpx.AsyncClient(timeout=60) as client, AsyncSessionClient(proxy.base_url) as api:
            async def harness(n: int) -> None:
                for _ in range(5):
                    r = await client.post(proxy.session_base_url(f"s{n}") + "/chat/completions",
                                          json=chat(stream=n % 2 == 0))
                    assert r.status_code == 200

            async def trainer() -> None:
                for _ in range(20):
                    for n in range(8):
                        try:
                            await api.sequences(f"s{n}")
                        except SessionApiError as exc:  # not yet a session: its first call is in flight
                            assert exc.code == "unknown_session"
                    await asyncio.sleep(0)

            await asyncio.gather(trainer(), *(harness(n) for n in range(8)))
            documents = [await api.session(f"s{n}") for n in range(8)]
    assert [d["settled_calls"] for d in documents] == [5] * 8
    assert all([c["index"] for c in d["calls"]] == list(range(5)) for d in documents)


async def test_a_slow_read_never_holds_model_traffic(tmp_path, upstream, monkeypatch):
    import threading

    from rollout_dataset.proxy import session_api

    entered, release = threading.Event(), threading.Event()
    real = session_api.snapshot

    def slow_snapshot(*args, **kwargs):
        entered.set()
        release.wait(60)  # the export of a huge session, as long as the test wants
        return real(*args, **kwargs)

    monkeypatch.setattr(session_api, "snapshot", slow_snapshot)
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        await two_sessions(proxy)
        async with AsyncSessionClient(proxy.base_url) as api, httpx.AsyncClient(timeout=30) as client:
            read = asyncio.ensure_future(api.sequences("mine"))
            await asyncio.to_thread(entered.wait, 30)
            answered = await client.post(proxy.session_base_url("mine") + "/chat/completions", json=chat())
            listed = await api.sessions()
            still_reading = not read.done()
            release.set()
            document = await read
    assert answered.status_code == 200 and still_reading and len(listed) == 2
    assert document["settled_calls"] in (1, 2)


def test_the_proxy_command_reads_the_token_from_the_environment(monkeypatch):
    import argparse

    from rollout_dataset.cli.proxy_cmd import add_session_api_arguments, session_api_settings

    parser = argparse.ArgumentParser()
    add_session_api_arguments(parser)
    monkeypatch.setenv("ROLLOUT_SESSION_API_TOKEN", "from-env")
    assert session_api_settings(parser.parse_args([]))["session_api_token"] == "from-env"
    assert session_api_settings(parser.parse_args(["--session-api-token", "flag"]))["session_api_token"] == "flag"
    off = session_api_settings(parser.parse_args(["--no-session-api"]))
    assert off["session_api"] is False and off["session_api_token"] is None


async def test_every_worker_serves_the_same_sessions_and_a_seal_one_took_is_kept_by_all(tmp_path, upstream):
    no_reuse = httpx.Limits(max_connections=16, max_keepalive_connections=0)  # each call to whichever worker
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", workers=2, session_api=True,
                            session_api_token="w") as proxy:
        async with httpx.AsyncClient(limits=no_reuse, timeout=60) as client:
            for n in range(6):
                r = await client.post(proxy.session_base_url("s") + "/chat/completions", json=chat(f"call {n}"))
                assert r.status_code == 200
            headers = {"authorization": "Bearer w"}
            reads = [(await client.get(f"{proxy.root_url}/sessions/s", headers=headers)).json() for _ in range(6)]
            sealed = await client.post(f"{proxy.root_url}/sessions/s/seal", headers=headers)
            refused = [(await client.post(proxy.session_base_url("s") + "/chat/completions", json=chat())).status_code
                       for _ in range(6)]
            late = [(await client.post(f"{proxy.root_url}/sessions/s/reward", headers=headers,
                                       json={"reward": 1})).status_code for _ in range(4)]
    assert {d["settled_calls"] for d in reads} == {6} and {d["state"] for d in reads} == {"open"}
    assert sealed.status_code == 200 and sealed.json()["seal"]["records"] == 6
    assert refused == [409] * 6 and late == [409] * 4


async def test_a_stream_the_upstream_drops_is_a_settled_call_with_its_error(tmp_path, upstream):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        async with httpx.AsyncClient(timeout=30) as client, AsyncSessionClient(proxy.base_url) as api:
            async with client.stream("POST", proxy.session_base_url("s") + "/chat/completions",
                                     json=chat(model="drop", stream=True)) as stream:
                body = b"".join([chunk async for chunk in stream.aiter_raw()])
            document = await api.wait_settled("s")
            session = await api.session("s")
    assert b"error" in body
    assert document["settled_calls"] == 1 and document["calls_in_flight"] == 0
    assert session["calls"][0]["error"] == "upstream_disconnect"


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Origin": "null"},
                                     {"Host": "evil.example:80"}, {"Host": "rebound.example"}])
async def test_a_request_from_a_web_page_or_a_rebound_name_is_refused(tmp_path, upstream, headers):
    async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "t", session_api=True) as proxy:
        await two_sessions(proxy)
        for method, path in (("GET", "/sessions"), ("GET", "/sessions/mine/sequences"), ("POST", "/sessions/mine/seal")):
            status, answer = await raw(proxy, method, path, headers=headers)
            assert status == 403 and answer["error"]["code"] == "browser_refused", (path, answer)
            assert SECRET_TEXT not in json.dumps(answer)
        _, document = await raw(proxy, "GET", "/sessions/mine", headers={"Host": f"localhost:{proxy.port}"})
    assert document["state"] == "open"
