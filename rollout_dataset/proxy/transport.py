"""The default upstream transport: HTTP/1.1 keep-alive connections parsed by httptools, behind httpx's API.

The proxy talks to one kind of peer, an OpenAI-compatible server, over HTTP/1.1. What it needs from a
client is small: send a request on a pooled connection, hand the response body on read by read,
and name every failure by its cause. A client library's per-call machinery (aiohttp's request and
response objects, its header normalisation, timers per read) measured 0.29 ms of CPU per call
through the proxy, more than a quarter of the proxy's whole per-call cost on the 2 cores it shares
with the model server. So this module keeps only the connections and their life cycle; every byte
of the response is parsed by httptools (llhttp, the parser under uvicorn and Node.js).

It keeps httpx's interface (`httpx.Request` in, `httpx.Response` out), so httpx-sse and the test
seam ``transport=httpx.ASGITransport(app)`` work unchanged. Failures map by cause, because the
proxy's error records depend on telling them apart: a refused connection is `httpx.ConnectError`,
a server that closes before answering is `httpx.RemoteProtocolError`, a body cut short is
`httpx.ReadError`, a malformed answer is `httpx.RemoteProtocolError`, and only real timeouts are
`httpx.TimeoutException`.

What a hostile or broken upstream can do is bounded here: response headers past
`MAX_HEADER_BYTES` end the call (httptools itself would buffer them without limit); a body that
arrives faster than the proxy forwards it stops being read past `HIGH_WATER_BYTES` per connection
(TCP backpressure reaches the server); bytes the server sends when no request is waiting close the
connection; a connection is reused only after a complete, keep-alive answer.

An upstream given by host name is looked up here, not by the event loop: in one thread of the
transport's own, under `SPARE_HANDOVER_LOCK` (`proxy/descriptors.py`), so the files and socket
the lookup opens never take the descriptor a spare frees for a record; concurrent connections to one
host share a lookup. The addresses are tried in the order the resolver gives them; TLS still
names the host (SNI and certificate check), and the Host header is the URL's.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import socket
import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Callable

import httptools
import httpx

from rollout_dataset.proxy.descriptors import SPARE_HANDOVER_LOCK, note_out_of_descriptors
from rollout_dataset.proxy.redact import redact_url, redact_urls_in_text

__all__ = ["UpstreamTransport", "MAX_HEADER_BYTES", "HIGH_WATER_BYTES"]

#: Bytes of status line and headers an upstream answer may take before the call fails.
MAX_HEADER_BYTES = 64 * 1024
#: Body bytes buffered per connection, not yet taken by the proxy, before reading pauses.
HIGH_WATER_BYTES = 256 * 1024
_SKIPPED_REQUEST_HEADERS = frozenset({b"host", b"content-length", b"transfer-encoding", b"connection"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_Key = tuple[str, str, int]  # (scheme, host, port): the connections a call may use


class _UnaskedAnswer(Exception):
    """Raised inside the parser when a further answer begins on a connection whose call has its own."""


class _Connection(asyncio.Protocol):
    """One upstream connection: parses answers with httptools and buffers body reads for one consumer."""

    def __init__(self, owner: "UpstreamTransport", key: _Key) -> None:
        self.owner = owner
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.url = ""  # the (redacted) URL of the request in flight, for messages
        self.idle_since = 0.0
        self.released = False  # its pool slot is given back (once)
        self._reset()

    def _reset(self) -> None:
        self.busy = False  # a request is in flight on it
        self.head_bytes = 0
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.length_known = False  # content-length, chunked, or no body: else the body ends with the connection
        self.keep_alive = True  # the server lets the connection serve another call after this answer
        self.head_only = False
        self.informational = False
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.paused = False
        self.complete = False
        self.error: httpx.TransportError | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.wait_since = 0.0
        self.read_timeout: float | None = None
        self.timer: asyncio.TimerHandle | None = None

    # ---- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.busy or self.complete or self.error is not None:
            # An answer nobody asked for (or bytes after a complete one): the connection cannot be trusted.
            self._close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError(f"{self.url} switched protocols, which the proxy does not relay"))
            return
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _UnaskedAnswer):
                self._close()  # the call's own answer is whole; the connection is not reused
            else:
                self._fail(httpx.RemoteProtocolError(f"{self.url} sent a malformed HTTP response: {exc}"))
            return
        if not self.status:  # still in the headers (httptools would buffer them without limit)
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEADER_BYTES:
                self._fail(httpx.RemoteProtocolError(
                    f"{self.url} sent response headers over {MAX_HEADER_BYTES} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._forget(self)
        if self.busy and not self.complete and self.error is None:
            if self.status and not self.length_known and not self.informational:
                self.complete = True  # the end of a body without a length
            elif self.status:
                self.error = httpx.ReadError(redact_urls_in_text(
                    f"{self.url} ended the body early: the connection closed"
                    + (f" ({type(exc).__name__}: {exc})" if exc else "")))
            else:
                self.error = httpx.RemoteProtocolError(f"{self.url} closed the connection")
        self._wake()

    # ---- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second answer in the same read as the first: stop before it touches this call
            raise _UnaskedAnswer()
        self.headers = []
        self.length_known = False
        self.informational = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        lower = name.lower()
        if lower == b"content-length" or (lower == b"transfer-encoding" and b"chunked" in value.lower()):
            self.length_known = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            self.informational = True  # 100 Continue, 103 Early Hints: the answer follows
            return
        self.status = status
        if status in (204, 304):
            self.length_known = True
        if self.head_only:  # a HEAD answer has no body, whatever its headers say; llhttp cannot be told
            self.complete = True
            self.keep_alive = False  # so the connection is not reused (llhttp would wait for that body)
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.head_only:
            return
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            return
        self.complete = True
        if not self.parser.should_keep_alive():
            self.keep_alive = False
        self._wake()

    # ---- the consumer's side ------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: httpx.TransportError) -> None:
        if self.error is None and not self.complete:
            self.error = error
        self._close()
        self._wake()

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.owner._forget(self)

    async def wait(self) -> None:
        """Wait for the next parser event (headers, a body read, the end, a failure or a timeout)."""
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.wait_since = loop.time()
        if self.read_timeout is not None and self.timer is None:
            self.timer = loop.call_at(self.wait_since + self.read_timeout, self._check_timeout)
        try:
            await self.waiter
        finally:
            self.waiter = None

    def _check_timeout(self) -> None:
        """One timer per call, moved on lazily: fires the read timeout only if a wait has lasted that long."""
        self.timer = None
        if self.waiter is None or self.read_timeout is None:
            return
        deadline = self.wait_since + self.read_timeout
        loop = asyncio.get_running_loop()
        if loop.time() >= deadline:
            self._fail(httpx.ReadTimeout(f"reading from {self.url} timed out"))
        else:
            self.timer = loop.call_at(deadline, self._check_timeout)

    def take(self) -> bytes:
        """The buffered body bytes (and reading resumes if it was paused)."""
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None and not self.transport.is_closing():
            self.paused = False
            self.transport.resume_reading()
        return data

    def end_call(self) -> None:
        """The consumer is done: back to the pool after a whole keep-alive answer, else closed."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        reusable = (self.complete and self.error is None and self.keep_alive and self.length_known
                    and not self.chunks and self.transport is not None and not self.transport.is_closing())
        if reusable:
            self._reset()
            self.owner._put_idle(self)
        else:
            self._close()


class _Body(httpx.AsyncByteStream):
    """The response body, read by read as the connection receives it."""

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            if conn.chunks:
                yield conn.take()
            elif conn.error is not None:
                raise conn.error
            elif conn.complete:
                return
            else:
                await conn.wait()

    async def read_all(self) -> bytes:
        """The whole body in one piece, without httpx's per-chunk decoder layers.

        The caller must only use it for bodies that need no content decoding (no
        ``content-encoding`` other than identity): the bytes are returned as received.

        Returns:
            The body bytes.

        Raises:
            httpx.TransportError: the upstream failed mid-body, or a read timed out.
        """
        conn = self._conn
        parts: list[bytes] = []
        while True:
            if conn.chunks:
                parts.append(conn.take())  # taken as it comes, so reading never pauses here
            elif conn.error is not None:
                raise conn.error
            elif conn.complete:
                return parts[0] if len(parts) == 1 else b"".join(parts)
            else:
                await conn.wait()

    async def aclose(self) -> None:
        """Give the connection back to the pool after a whole answer; close one left half read."""
        if not self._ended:
            self._ended = True
            self._conn.end_call()


class UpstreamTransport(httpx.AsyncBaseTransport):
    """An httpx transport over pooled HTTP/1.1 connections (httptools parsing), one pool per event loop.

    No cookies are kept, no redirects followed, bodies are not decompressed (httpx does that if
    asked), environment proxies are not read here (`rollout_dataset.proxy.trust_env` decides, from
    them, whether this transport or httpx's own through a proxy carries the calls).

    Args:
        limits: connection pool size (``max_connections``: open connections at once, a call waits up
            to its ``pool`` timeout for one), idle connections kept (``max_keepalive_connections``) and
            for how long (``keepalive_expiry``, seconds; keep it under the upstream's own).
        verify: verify TLS certificates of https upstreams.
        ssl_context: the TLS context of https upstreams (default: the system's verify paths, or no
            verification without `verify`); `rollout_dataset.proxy.trust_env` passes httpx's, which
            honours SSL_CERT_FILE/SSL_CERT_DIR as httpx does.
    """

    def __init__(self, limits: httpx.Limits, verify: bool = True, ssl_context: ssl.SSLContext | None = None) -> None:
        self._max_open = limits.max_connections
        self._max_idle = limits.max_keepalive_connections
        self._expiry = limits.keepalive_expiry
        self._verify = verify
        self._ssl: ssl.SSLContext | None = ssl_context
        self._idle: dict[_Key, list[_Connection]] = {}
        self._idle_count = 0
        self._open = 0
        self._slot_waiters: collections.deque[tuple[_Key, asyncio.Future[_Connection | None]]] = collections.deque()
        self._all: set[_Connection] = set()
        self._closed = False
        self._lookups: dict[tuple[str, int], asyncio.Future[list[str]]] = {}  # in progress, shared
        self._lookup_thread: ThreadPoolExecutor | None = None

    # ---- the pool -----------------------------------------------------------------------------

    def _put_idle(self, conn: _Connection) -> None:
        if self._closed:
            conn._close()
            return
        conn.idle_since = asyncio.get_running_loop().time()
        self._idle.setdefault(conn.key, []).append(conn)
        self._idle_count += 1
        self._hand_slot()  # a call waiting for a connection to this host takes it
        if self._max_idle is not None and self._idle_count > self._max_idle:
            self._close_an_idle()

    def _take_idle(self, key: _Key) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            self._idle_count -= 1
            if conn.transport is None or conn.transport.is_closing():
                continue
            if self._expiry is not None and now - conn.idle_since > self._expiry:
                conn._close()  # the upstream may be closing it right now
                continue
            return conn
        return None

    def _forget(self, conn: _Connection) -> None:
        """A connection is closed (or closing): out of the idle list, its slot given back (once)."""
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
            self._idle_count -= 1
        if not conn.released:
            conn.released = True
            self._all.discard(conn)
            self._open -= 1
            if self._slot_waiters:
                asyncio.get_running_loop().call_soon(self._hand_slot)  # not from inside the pool's own steps

    def _hand_slot(self) -> None:
        """Serve the longest-waiting call: a new slot if one is free, else an idle connection to its host,
        else close an idle connection to another host (its slot is handed on once it is released)."""
        waiters = self._slot_waiters
        while waiters and waiters[0][1].done():
            waiters.popleft()
        if not waiters:
            return
        key, waiter = waiters[0]
        if self._max_open is None or self._open < self._max_open:
            waiters.popleft()
            self._open += 1
            waiter.set_result(None)
            return
        conn = self._take_idle(key)
        if conn is not None:
            waiters.popleft()
            waiter.set_result(conn)
            return
        self._close_an_idle()  # to another host: its slot comes back through `_forget`

    def _close_an_idle(self) -> None:
        """Close the longest-idle connection of the first host that has any (its slot is given back)."""
        for idle in self._idle.values():
            if idle:
                idle[0]._close()
                return

    async def _wait_for_connection(self, key: _Key, url: str,
                                   pool_timeout: float | None) -> _Connection | None:
        """A pooled connection to `key`, or None with one more open connection counted (a new one may be
        opened); waits up to `pool_timeout` while `max_connections` are open."""
        conn = self._take_idle(key)
        if conn is not None:
            return conn
        if self._max_open is None or self._open < self._max_open:
            self._open += 1
            return None
        waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append((key, waiter))
        self._hand_slot()
        try:
            return await asyncio.wait_for(waiter, pool_timeout)  # a handed slot is already counted
        except asyncio.TimeoutError:
            raise httpx.PoolTimeout(f"no free connection to {url} within {pool_timeout:g} s "
                                    f"({self._max_open} open; see max_connections)") from None
        except BaseException:
            if waiter.done() and not waiter.cancelled():  # served as we were cancelled: pass it on
                handed = waiter.result()
                if handed is None:
                    self._open -= 1
                    self._hand_slot()
                else:
                    self._put_idle(handed)
            raise

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            context = ssl.create_default_context()
            if not self._verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self._ssl = context
        return self._ssl

    async def _connect(self, key: _Key, url: str, timeouts: dict[str, Any]) -> _Connection:
        """Open a connection in the slot already counted for it (given back if opening fails)."""
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        context = self._ssl_context() if scheme == "https" else None
        factory: Callable[[], _Connection] = lambda: _Connection(self, key)  # noqa: E731
        try:
            _, conn = await asyncio.wait_for(self._open_connection(loop, factory, host, port, context),
                                             timeouts.get("connect"))
        except BaseException as exc:
            self._open -= 1
            self._hand_slot()
            if isinstance(exc, asyncio.TimeoutError):
                raise httpx.ConnectTimeout(f"connecting to {url} timed out") from None
            if isinstance(exc, OSError):
                note_out_of_descriptors(exc)
                raise httpx.ConnectError(redact_urls_in_text(f"cannot connect to {url}: {exc}")) from None
            raise
        self._all.add(conn)
        return conn

    async def _open_connection(self, loop: asyncio.AbstractEventLoop, factory: Callable[[], _Connection], host: str,
                               port: int, context: ssl.SSLContext | None) -> tuple[asyncio.BaseTransport, _Connection]:
        """A connection to the first of the host's addresses that takes it (an address: no lookup)."""
        errors: list[OSError] = []
        for address in await self._addresses(host, port):
            try:  # an address literal: the event loop connects without a lookup of its own
                return await loop.create_connection(factory, address, port, ssl=context,
                                                    server_hostname=host if context else None)
            except OSError as exc:
                errors.append(exc)
        if not errors:  # pragma: no cover - a lookup answers addresses or fails
            raise OSError(f"{host} has no address")
        if len({str(exc) for exc in errors}) == 1:
            raise errors[0]
        joined = "; ".join(f"{exc}" for exc in errors)  # every address's failure, as asyncio joins them
        raise OSError(errors[0].errno, joined) if errors[0].errno is not None else OSError(joined)

    async def _addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to: the host itself when it is an address, else the lookup's answer.

        Raises:
            OSError: the lookup failed (`socket.gaierror`).
        """
        try:
            ipaddress.ip_address(host)
            return [host]
        except ValueError:
            pass
        key = (host, port)
        lookup = self._lookups.get(key)
        if lookup is None:
            if self._lookup_thread is None:
                self._lookup_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="upstream-lookup")
            lookup = asyncio.get_running_loop().run_in_executor(self._lookup_thread, _look_up, host, port)
            self._lookups[key] = lookup

            def done(future: asyncio.Future[list[str]]) -> None:
                if self._lookups.get(key) is future:
                    del self._lookups[key]
                if not future.cancelled():
                    future.exception()  # retrieved: every caller may have left (a connect timeout)

            lookup.add_done_callback(done)
        return await asyncio.shield(lookup)  # a caller that leaves does not cancel it for the others

    # ---- httpx.AsyncBaseTransport -------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send one request; the response body streams from the pooled connection.

        Args:
            request: the request (its ``timeout`` extension sets connect, read and pool timeouts).

        Returns:
            The response, headers read, body not yet.

        Raises:
            httpx.UnsupportedProtocol: the URL is not http or https.
            httpx.ConnectError: the upstream refused or could not be reached.
            httpx.TimeoutException: connect, read or pool timeout.
            httpx.RemoteProtocolError: the upstream closed the connection or answered malformed.
        """
        url = request.url
        shown = redact_url(str(url)) or ""  # what failures may name: never a credential of the query
        scheme = url.scheme
        if scheme not in ("http", "https") or not url.host:
            raise httpx.UnsupportedProtocol(f"invalid upstream URL {shown}")
        key = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        timeouts = request.extensions.get("timeout") or {}
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        head = [request.method.encode("ascii"), b" ", url.raw_path, b" HTTP/1.1\r\nhost: ", url.netloc, b"\r\n"]
        lines = 2
        if body or request.method in _BODY_METHODS:
            head += [b"content-length: ", str(len(body)).encode("ascii"), b"\r\n"]
            lines += 1
        for name, value in request.headers.raw:
            if name.lower() not in _SKIPPED_REQUEST_HEADERS:
                head += [name, b": ", value, b"\r\n"]
                lines += 1
        head.append(b"\r\n")
        message = b"".join(head)
        if message.count(b"\n") != lines + 1 or message.count(b"\r") != lines + 1:
            # a line break inside a header would start a header (or a request) of its own upstream
            raise httpx.LocalProtocolError(f"a header of the request to {shown} holds a line break")
        conn = await self._wait_for_connection(key, shown, timeouts.get("pool"))
        if conn is None:
            conn = await self._connect(key, shown, timeouts)
        conn.busy = True
        conn.url = shown
        conn.head_only = request.method == "HEAD"
        conn.read_timeout = timeouts.get("read")
        assert conn.transport is not None
        conn.transport.write(message + body if body else message)
        try:
            while not conn.status:
                if conn.error is not None:
                    raise conn.error
                if conn.complete:  # pragma: no cover - a complete answer always has a status
                    break
                await conn.wait()
        except BaseException:
            conn.end_call()  # cancelled or failed before the headers: the connection is not reused
            raise
        return httpx.Response(conn.status, headers=conn.headers, stream=_Body(conn), request=request,
                              extensions={"http_version": b"HTTP/1.1"})

    async def aclose(self) -> None:
        """Close every connection, idle or in use."""
        self._closed = True
        for conn in list(self._all):
            conn._close()
        self._idle.clear()
        self._idle_count = 0
        if self._lookup_thread is not None:
            self._lookup_thread.shutdown(wait=False)  # a lookup in progress ends on its own
            self._lookup_thread = None


def _look_up(host: str, port: int) -> list[str]:
    """A host name's addresses, in the resolver's order, looked up while no spare descriptor is handed over.

    Args:
        host: the upstream's host name.
        port: its port.

    Returns:
        The addresses (no repeats).

    Raises:
        socket.gaierror: the name does not resolve (or the lookup could not open what it reads).
    """
    with SPARE_HANDOVER_LOCK:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))
