"""The in-flight byte bound: request bodies plus buffered response bytes held by all calls at once.

Past `max_inflight_bytes` a call is refused with a recorded 503, so a burst of long contexts cannot
exhaust the proxy's memory.
"""

from __future__ import annotations

import httpx

from rollout_dataset.proxy.asgi_types import Send
from rollout_dataset.proxy.call import Call

__all__ = ["InflightBound", "read_whole"]


class InflightBound:
    """Counting bytes against the proxy's in-flight limit (a mixin of `rollout_dataset.proxy.app.ProxyApp`)."""

    inflight_bytes: int
    max_inflight_bytes: int

    def _reserve_nowait(self, call: Call, size: int) -> bool:
        """Count `size` more bytes of a call against the in-flight limit; False when they do not fit."""
        if self.inflight_bytes + size > self.max_inflight_bytes:
            return False
        self.inflight_bytes += size
        call.reserved += size
        return True

    def _overload_message(self, call: Call, size: int) -> str:
        return (f"the proxy is holding {self.inflight_bytes} bytes of request and response bodies; {size} more "
                f"for this call would pass its limit of {self.max_inflight_bytes} bytes "
                "(max_inflight_bytes): retry later")

    async def _reserve(self, call: Call, size: int, send: Send) -> bool:
        """Reserve bytes or answer 503 (recorded); returns whether the call may go on."""
        if self._reserve_nowait(call, size):
            return True
        call.notes.append(f"refused: {size} more bytes past the in-flight limit")
        await self._reply_error(call, send, 503, "proxy_overloaded", self._overload_message(call, size))
        return False

    def _release(self, call: Call) -> None:
        self.inflight_bytes -= call.reserved
        call.reserved = 0

    async def _read_counted(self, call: Call, response: httpx.Response, send: Send) -> bytes | None:
        """The whole upstream body, counted against the in-flight limit (None: refused with 503)."""
        declared = call.upstream_headers.get("content-length")
        if declared is not None and declared.strip().isdigit():
            if not await self._reserve(call, int(declared), send):
                return None
            data = await read_whole(response, call.upstream_headers)
            if len(data) > int(declared):
                self._reserve_nowait(call, len(data) - int(declared))  # counted even when over: it is here
            return data
        if call.upstream_headers.get("content-encoding", "identity").strip().lower() != "identity":
            data = await response.aread()  # decoded by httpx; counted once here
            if not await self._reserve(call, len(data), send):
                return None
            return data
        parts: list[bytes] = []
        async for chunk in response.aiter_raw():
            if not await self._reserve(call, len(chunk), send):
                return None
            parts.append(chunk)
        return b"".join(parts)


async def read_whole(response: httpx.Response, names: dict[str, str]) -> bytes:
    """The whole response body; one read from the default transport when nothing needs decoding."""
    read_all = getattr(response.stream, "read_all", None)
    if read_all is not None and names.get("content-encoding", "identity").strip().lower() == "identity":
        return await read_all()
    return await response.aread()
