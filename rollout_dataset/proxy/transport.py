"""The default upstream transport: aiohttp's connection pool behind httpx's transport API.

httpx's own transport (httpcore + h11, pure Python) costs about three times the CPU per call of
aiohttp, whose HTTP parser is C. This transport keeps httpx's interface (`httpx.Request` in,
`httpx.Response` out, so httpx-sse and the test seam `transport=httpx.ASGITransport(app)` work
unchanged) and maps aiohttp's failures by cause, because the proxy's error records depend on
telling them apart: a refused connection is `httpx.ConnectError`, a server that closes the
connection is `httpx.RemoteProtocolError` (or `httpx.ReadError` mid-body), and only real timeouts
are `httpx.TimeoutException`. (The `httpx-aiohttp` package does the same job but maps a refused
connection to a timeout, and adds two wrapper layers per body chunk.)
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import aiohttp
import httpx

from rollout_dataset.proxy.redact import redact_url, redact_urls_in_text

__all__ = ["UpstreamTransport"]


def _mapped(exc: BaseException, url: str) -> httpx.TransportError:
    """The httpx exception for an aiohttp (or asyncio) failure."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return httpx.ConnectTimeout(f"connecting to {url} timed out")
        return httpx.ReadTimeout(f"reading from {url} timed out")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(f"cannot connect to {url}: {exc.os_error}")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(f"{url} closed the connection")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return httpx.ReadError(redact_urls_in_text(f"{url} ended the body early: {exc}"))
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(f"invalid upstream URL {url}")
    return httpx.ReadError(redact_urls_in_text(f"{type(exc).__name__} talking to {url}: {exc}"))


class _Body(httpx.AsyncByteStream):
    """The response body, chunk by chunk as aiohttp receives it."""

    def __init__(self, response: aiohttp.ClientResponse, url: str) -> None:
        self._response = response
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise _mapped(exc, self._url) from None  # aiohttp's own message may hold the full URL

    async def read_all(self) -> bytes:
        """The whole body in one read, without httpx's per-chunk decoder layers.

        The caller must only use it for bodies that need no content decoding (no
        ``content-encoding`` other than identity): the bytes are returned as received.

        Returns:
            The body bytes.

        Raises:
            httpx.TransportError: the upstream failed mid-body (mapped like `__aiter__`).
        """
        try:
            return await self._response.content.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise _mapped(exc, self._url) from None  # aiohttp's own message may hold the full URL

    async def aclose(self) -> None:
        """Return a fully read connection to the pool; close one that was left half read."""
        if self._response.content.at_eof():
            self._response.release()  # back to the pool
        else:
            self._response.close()  # body not read to the end: drop the connection (vLLM aborts the request)


class UpstreamTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends requests with one shared `aiohttp.ClientSession`.

    The session is created in the running event loop on first use. No cookies are kept, no
    redirects followed, bodies are not decompressed (httpx does that if asked), environment
    proxies are ignored.

    Args:
        limits: connection pool size and keep-alive expiry.
        verify: verify TLS certificates of https upstreams.
    """

    def __init__(self, limits: httpx.Limits, verify: bool = True) -> None:
        self._limits = limits
        self._verify = verify
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[Any, ...], aiohttp.ClientTimeout] = {}

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._limits.max_connections or 0,
                                             keepalive_timeout=self._limits.keepalive_expiry,
                                             ssl=self._verify)
            self._session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                                  auto_decompress=False, trust_env=False,
                                                  skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"))
        return self._session

    def _timeout(self, request: httpx.Request) -> aiohttp.ClientTimeout:
        spec = request.extensions.get("timeout") or {}
        key = (spec.get("connect"), spec.get("read"), spec.get("pool"))
        timeout = self._timeouts.get(key)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=key[0], sock_read=key[1], connect=key[2])
            self._timeouts[key] = timeout
        return timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send one request; the response body streams from the pooled connection.

        Args:
            request: the request (its ``timeout`` extension sets connect/read timeouts).

        Returns:
            The response, headers read, body not yet.

        Raises:
            httpx.ConnectError: the upstream refused or could not be reached.
            httpx.TimeoutException: connect or read timeout.
            httpx.RemoteProtocolError: the upstream closed the connection.
        """
        url = str(request.url)
        shown = redact_url(url) or ""  # what failures may name: never a credential of the query
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw
                   if k.lower() not in (b"host", b"content-length", b"transfer-encoding")]
        try:
            response = await self._get_session().request(
                request.method, url, headers=headers, data=request.content or None, allow_redirects=False,
                timeout=self._timeout(request))
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise _mapped(exc, shown) from None  # aiohttp's own message may hold the full URL
        return httpx.Response(response.status, headers=response.raw_headers, stream=_Body(response, shown),
                              request=request, extensions={"http_version": b"HTTP/1.1"})

    async def aclose(self) -> None:
        """Close the pooled connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None
