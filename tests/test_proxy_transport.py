"""The proxy's upstream connections: reuse, limits, and what a broken or hostile server's bytes can do.

Each upstream here is a raw TCP server on loopback (`proxy_fakes.serve_raw`) that sends exactly the
bytes a test gives it; the harness side is a plain httpx client of the proxy.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest
import trustme

from proxy_fakes import serve_raw
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.transport import HIGH_WATER_BYTES, MAX_HEADER_BYTES, UpstreamTransport

MESSAGES = [{"role": "user", "content": "hi"}]
BODY = (b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
        b'"content":"ok"},"finish_reason":"stop"}]}')


def answer(body: bytes = BODY, head: bytes = b"HTTP/1.1 200 OK\r\n") -> bytes:
    return head + b"content-type: application/json\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body


def replying(*replies: tuple[bytes, bool], delay: float = 0.0):
    """An upstream's `answer`: the given replies in turn, the last one from then on."""
    sent = [0]

    async def reply(head: bytes) -> tuple[bytes, bool]:
        if delay:
            await asyncio.sleep(delay)
        sent[0] += 1
        return replies[min(sent[0], len(replies)) - 1]
    return reply


async def run_calls(tmp_path: Path, reply, calls: int = 1, method: str = "POST", concurrent: bool = False,
                    tls: ssl.SSLContext | None = None, **proxy_args) -> tuple[list[httpx.Response], list[dict], int]:
    """`calls` calls through a proxy in front of a raw upstream (HTTPS with `tls`): (responses, records,
    connections accepted)."""
    async with serve_raw(reply, tls=tls) as (root, accepted):
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces", **proxy_args) as proxy:
            async with httpx.AsyncClient(timeout=30) as client:
                async def one() -> httpx.Response:
                    if method == "POST":
                        return await client.post(proxy.base_url + "/chat/completions",
                                                 json={"model": "m", "messages": MESSAGES})
                    return await client.request(method, proxy.base_url + "/models")
                if concurrent:
                    responses = list(await asyncio.gather(*(one() for _ in range(calls))))
                else:
                    responses = [await one() for _ in range(calls)]
            records = read_trace(proxy.trace_path())
        return responses, records, len(accepted)


async def test_sequential_calls_reuse_one_upstream_connection(tmp_path: Path):
    responses, records, accepted = await run_calls(tmp_path, replying((answer(), False)), calls=3)
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert accepted == 1 and len(records) == 3


async def test_calls_past_max_connections_wait_for_a_free_connection(tmp_path: Path):
    reply = replying((answer(), False), delay=0.05)
    responses, records, accepted = await run_calls(tmp_path, reply, calls=4, concurrent=True, max_connections=1)
    assert [r.status_code for r in responses] == [200] * 4
    assert accepted == 1 and len(records) == 4


async def test_a_connection_the_upstream_closed_after_its_answer_is_not_reused(tmp_path: Path):
    responses, records, accepted = await run_calls(tmp_path, replying((answer(), True)), calls=3)
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert accepted == 3 and [r["error"] for r in records] == [None] * 3


async def test_a_body_ended_by_closing_the_connection_reaches_the_harness_whole(tmp_path: Path):
    reply = replying((b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n" + BODY, True))
    responses, records, _ = await run_calls(tmp_path, reply)
    assert responses[0].status_code == 200 and responses[0].content == BODY
    assert records[0]["error"] is None and records[0]["response"]["choices"][0]["message"]["content"] == "ok"


async def test_a_second_answer_sent_unasked_reaches_no_call(tmp_path: Path):
    other = BODY.replace(b'"ok"', b'"unasked"')
    responses, records, accepted = await run_calls(tmp_path, replying((answer() + answer(other), False)), calls=2)
    assert [r.content for r in responses] == [BODY, BODY]
    assert accepted == 2  # the connection that carried the extra answer was dropped


async def test_an_informational_answer_before_the_answer_is_skipped(tmp_path: Path):
    responses, _, _ = await run_calls(tmp_path, replying((b"HTTP/1.1 100 Continue\r\n\r\n" + answer(), False)))
    assert responses[0].status_code == 200 and responses[0].content == BODY


async def test_a_head_answer_ends_at_its_headers_whatever_its_content_length_says(tmp_path: Path):
    reply = replying((b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n", False))
    responses, records, _ = await run_calls(tmp_path, reply, method="HEAD", upstream_timeout=5)
    assert responses[0].status_code == 200
    assert records[0]["status"] == 200 and records[0]["error"] is None


async def test_response_headers_past_the_limit_fail_the_call_with_a_502_naming_them(tmp_path: Path):
    endless = b"HTTP/1.1 200 OK\r\nx-filler: " + b"a" * (MAX_HEADER_BYTES + 1024)
    responses, records, _ = await run_calls(tmp_path, replying((endless, False)), upstream_timeout=5)
    assert responses[0].status_code == 502
    assert f"response headers over {MAX_HEADER_BYTES} bytes" in responses[0].json()["error"]["message"]
    assert records[0]["error"]["kind"] == "upstream_unreachable"


async def test_a_malformed_status_line_fails_the_call_with_a_502_naming_it(tmp_path: Path):
    responses, records, _ = await run_calls(tmp_path, replying((b"HTXP/1.1 200 OK\r\n\r\n", False)))
    assert responses[0].status_code == 502
    assert "malformed HTTP response" in responses[0].json()["error"]["message"]
    assert records[0]["error"]["kind"] == "upstream_unreachable"


async def test_an_upstream_that_closes_without_answering_gets_a_502_naming_it(tmp_path: Path):
    responses, records, _ = await run_calls(tmp_path, replying((b"", True)))
    assert responses[0].status_code == 502
    assert "closed the connection" in responses[0].json()["error"]["message"]
    assert records[0]["error"]["kind"] == "upstream_unreachable"


async def test_a_body_cut_short_is_named_and_its_call_recorded(tmp_path: Path):
    cut = answer()[:-10]
    responses, records, _ = await run_calls(tmp_path, replying((cut, True)))
    assert responses[0].status_code == 502
    assert "ended the body early" in responses[0].json()["error"]["message"]
    assert records[0]["error"]["kind"] == "upstream_disconnect"


async def test_a_stream_outrunning_a_harness_that_does_not_read_stops_being_read_from_the_upstream(tmp_path: Path):
    event = b"data: " + b"x" * 1000 + b"\n\n"
    body = event * 64_000  # 64 MB: far more than the loopback socket buffers on both sides hold
    reply = replying((b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body, False))
    async with serve_raw(reply) as (root, accepted):
        async with CaptureProxy(upstream=root, trace_dir=tmp_path / "traces") as proxy:
            async with httpx.AsyncClient(timeout=30) as client:
                async with client.stream("GET", proxy.base_url + "/models") as response:
                    chunks = response.aiter_raw()  # kept: a dropped iterator would close the stream
                    await chunks.__anext__()  # the stream started; the harness reads no more
                    connections = proxy._own_transports[0]._all  # the proxy's upstream connections (its one upstream)
                    deadline = asyncio.get_running_loop().time() + 30
                    while not any(conn.paused for conn in connections):  # were it to read on, it never pauses
                        assert asyncio.get_running_loop().time() < deadline, "the proxy kept reading"
                        await asyncio.sleep(0.05)
                    held = sum(conn.buffered for conn in connections)
                    assert held <= HIGH_WATER_BYTES + 256 * 1024  # at most one more read past the mark
                    assert accepted[0].transport.get_write_buffer_size() > len(body) // 2  # the rest waits upstream


@pytest.fixture
def tls_server_context() -> tuple[ssl.SSLContext, trustme.CA]:
    """A server TLS context for 127.0.0.1 signed by a throwaway CA (not trusted unless a test says so)."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context, ca


async def test_an_https_upstream_is_reached_with_its_certificate_verified(tmp_path: Path, tls_server_context,
                                                                         monkeypatch):
    context, ca = tls_server_context
    with ca.cert_pem.tempfile() as ca_file:
        monkeypatch.setenv("SSL_CERT_FILE", ca_file)  # the proxy's default verify paths now trust the CA
        responses, records, _ = await run_calls(tmp_path, replying((answer(), False)), tls=context)
    assert responses[0].status_code == 200 and responses[0].content == BODY
    assert records[0]["error"] is None


async def test_an_https_upstream_with_an_untrusted_certificate_gets_a_502_naming_it(tmp_path: Path,
                                                                                     tls_server_context):
    context, _ = tls_server_context
    responses, records, _ = await run_calls(tmp_path, replying((answer(), False)), tls=context)
    assert responses[0].status_code == 502
    assert "CERTIFICATE_VERIFY_FAILED" in responses[0].json()["error"]["message"]
    assert records[0]["error"]["kind"] == "upstream_unreachable"


async def test_idle_connections_past_max_keepalive_connections_are_closed():
    transport = UpstreamTransport(httpx.Limits(max_connections=8, max_keepalive_connections=1))
    async with serve_raw(replying((answer(), False), delay=0.05)) as (root, accepted):
        async with httpx.AsyncClient(transport=transport, base_url=root) as client:
            for _ in range(2):  # three at once need three connections; one of them is kept between rounds
                responses = await asyncio.gather(*(client.post("/v1/chat/completions", json={}) for _ in range(3)))
                assert [r.status_code for r in responses] == [200] * 3
    assert len(accepted) == 5


async def test_an_answer_saying_connection_close_is_not_followed_by_a_call_on_its_connection(tmp_path: Path):
    # the upstream keeps its side open: only the header says the connection is done
    reply = replying((answer(head=b"HTTP/1.1 200 OK\r\nconnection: close\r\n"), False))
    responses, records, accepted = await run_calls(tmp_path, reply, calls=2)
    assert [r.status_code for r in responses] == [200, 200]
    assert accepted == 2 and [r["error"] for r in records] == [None, None]


async def test_a_credential_holding_a_line_break_is_refused_before_anything_reaches_the_upstream(tmp_path: Path):
    responses, records, accepted = await run_calls(tmp_path, replying((answer(), False)),
                                                   api_key="sk-test\r\nx-injected: 1")
    assert responses[0].status_code == 502
    assert "holds a line break" in responses[0].json()["error"]["message"]
    assert accepted == 0 and records[0]["error"]["kind"] == "upstream_unreachable"


async def test_a_call_to_another_host_at_max_connections_closes_an_idle_connection_for_its_own():
    transport = UpstreamTransport(httpx.Limits(max_connections=1, max_keepalive_connections=1))
    async with serve_raw(replying((answer(), False))) as (first, first_accepted), \
            serve_raw(replying((answer(), False))) as (second, second_accepted):
        async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(5.0)) as client:
            for root in (first, second, first):  # the one slot moves between the hosts
                response = await client.post(root + "/v1/chat/completions", json={})
                assert response.status_code == 200 and response.content == BODY
    assert len(first_accepted) == 2 and len(second_accepted) == 1


# ---- an upstream named by host ------------------------------------------------------------------

async def test_a_host_named_upstream_is_looked_up_only_while_no_spare_descriptor_is_handed_over():
    """The lookup (which opens /etc/hosts, resolv.conf, a DNS socket) runs in a thread: while the
    recorder hands a spare descriptor over to a trace file, it waits, so it cannot take that number."""
    from rollout_dataset.proxy.descriptors import SPARE_HANDOVER_LOCK

    async with serve_raw(replying((answer(), False))) as (root, _):
        url = root.replace("127.0.0.1", "localhost") + "/v1/models"
        transport = UpstreamTransport(httpx.Limits(max_connections=4))
        try:
            with SPARE_HANDOVER_LOCK:  # as the recorder holds it from closing a spare to opening a file
                call = asyncio.ensure_future(transport.handle_async_request(httpx.Request("GET", url)))
                await asyncio.sleep(0.3)
                assert not call.done(), "the host name was looked up while a spare was handed over"
            response = await asyncio.wait_for(call, 10)
            assert response.status_code == 200
            await response.aread()
            await response.aclose()
        finally:
            await transport.aclose()


async def test_an_https_upstream_named_by_host_is_verified_and_told_that_name(tmp_path: Path, monkeypatch):
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)  # valid for the name only, not for 127.0.0.1
    names: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    heads: list[bytes] = []

    async def reply(head: bytes) -> tuple[bytes, bool]:
        heads.append(head)
        return answer(), False

    with ca.cert_pem.tempfile() as ca_file:
        monkeypatch.setenv("SSL_CERT_FILE", ca_file)
        async with serve_raw(reply, tls=context) as (root, _):
            upstream = root.replace("127.0.0.1", "localhost")
            async with CaptureProxy(upstream=upstream, trace_dir=tmp_path / "traces") as proxy:
                async with httpx.AsyncClient(timeout=30) as client:
                    response = await client.post(proxy.base_url + "/chat/completions",
                                                 json={"model": "m", "messages": MESSAGES})
                (record,) = read_trace(proxy.trace_path())
    assert response.status_code == 200 and response.content == BODY and record["error"] is None
    assert names == ["localhost"] and b"\r\nhost: " + upstream.removeprefix("https://").encode() + b"\r\n" in heads[0]


async def test_a_host_name_whose_first_address_refuses_is_reached_at_the_next(monkeypatch):
    import socket

    real = socket.getaddrinfo

    def two_addresses(host, port, *args, **kwargs):  # as a resolver answers a name with two addresses
        if host != "upstream.test":
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in ("127.0.0.2", "127.0.0.1")]

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
    async with serve_raw(replying((answer(), False))) as (root, accepted):
        url = root.replace("127.0.0.1", "upstream.test") + "/v1/models"
        transport = UpstreamTransport(httpx.Limits(max_connections=4))
        try:
            response = await transport.handle_async_request(httpx.Request("GET", url))
            assert response.status_code == 200 and len(accepted) == 1  # nothing listens on 127.0.0.2
            await response.aread()
            await response.aclose()
        finally:
            await transport.aclose()
