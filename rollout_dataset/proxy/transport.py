"""The default upstream transport: aiohttp's connection pool behind httpx's transport API.

`httpx_aiohttp.AiohttpTransport` does the work (aiohttp parses HTTP in C, at about a third of
httpcore's CPU per call on this kind of machine); this subclass only fixes how failures are mapped
to httpx exceptions, because the proxy's error records depend on telling them apart: a refused
connection is `httpx.ConnectError` (not a timeout), a server that closes the connection is
`httpx.RemoteProtocolError`, and only real timeouts are `httpx.TimeoutException`.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

__all__ = ["UpstreamTransport"]


def _remap(exc: httpx.TransportError) -> httpx.TransportError:
    cause = exc.__cause__
    if cause is None:
        return exc
    if isinstance(cause, (asyncio.TimeoutError, TimeoutError)):
        return exc if isinstance(exc, httpx.TimeoutException) else httpx.ReadTimeout(str(cause) or "timed out")
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(cause))
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(str(cause) or "server disconnected")
    if isinstance(cause, (aiohttp.ClientPayloadError, aiohttp.ClientOSError)):
        return httpx.ReadError(str(cause))
    return exc


class _Stream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx.TransportError as exc:
            raise _remap(exc) from exc.__cause__

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        except httpx.TransportError:  # closing a broken connection: nothing left to tell
            pass


class UpstreamTransport(AiohttpTransport):
    """`AiohttpTransport` with failures mapped by their cause (see the module docstring).

    Args:
        limits: connection pool limits.
        verify: verify TLS certificates (only meaningful for https upstreams).
    """

    def __init__(self, limits: httpx.Limits, verify: bool = True) -> None:
        super().__init__(limits=limits, verify=verify, trust_env=False)

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
        try:
            response = await super().handle_async_request(request)
        except httpx.TransportError as exc:
            raise _remap(exc) from exc.__cause__
        response.stream = _Stream(response.stream)
        return response
