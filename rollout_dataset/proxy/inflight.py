"""The in-flight byte bound: request bodies plus buffered response bytes held by all calls at once.

Past `max_inflight_bytes` a call is refused with a recorded 503, so a burst of long contexts cannot
exhaust the proxy's memory. The proxy's own calls to the server while it prepares a call (context
fitting's and on-policy mode's ``/tokenize``, ``/detokenize``, ``/v1/models``) read their answers
through `read_passing`, counted against the call being prepared (`InflightBound.counting`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import httpx

from rollout_dataset.errors import InflightLimitError
from rollout_dataset.proxy.asgi_types import Send
from rollout_dataset.proxy.call import Call
from rollout_dataset.proxy.error_answers import ErrorAnswerer

__all__ = ["InflightBound", "read_passing", "read_whole"]

#: the bound and the call whose preparation is running in this task (`InflightBound.counting`)
_preparing: contextvars.ContextVar[tuple[InflightBound, Call] | None] = contextvars.ContextVar("preparing",
                                                                                              default=None)


class InflightBound:
    """The in-flight stage: counts the bytes each call holds against one limit for all calls at once.

    Args:
        max_bytes: request bodies plus buffered response bytes held by all calls at once.
        answers: the error answerer (a call past the limit is refused with a recorded 503).
    """

    def __init__(self, max_bytes: int, answers: ErrorAnswerer) -> None:
        self.max_bytes = max_bytes
        self.answers = answers
        self.held = 0

    def reserve_nowait(self, call: Call, size: int) -> bool:
        """Count `size` more bytes of a call against the in-flight limit; False when they do not fit."""
        if self.held + size > self.max_bytes:
            return False
        self.held += size
        call.delivery.reserved += size
        return True

    def overload_message(self, size: int) -> str:
        """The message of a call refused because `size` more bytes would pass the limit."""
        return (f"the proxy is holding {self.held} bytes of request and response bodies; {size} more "
                f"for this call would pass its limit of {self.max_bytes} bytes "
                "(max_inflight_bytes): retry later")

    async def reserve(self, call: Call, size: int, send: Send) -> bool:
        """Reserve bytes or answer 503 (recorded).

        Args:
            call: the call holding the bytes.
            size: how many more.
            send: the ASGI send callable (for the 503).

        Returns:
            Whether the call may go on.
        """
        if self.reserve_nowait(call, size):
            return True
        call.notes.append(f"refused: {size} more bytes past the in-flight limit")
        await self.answers.reply_error(call, send, 503, "proxy_overloaded", self.overload_message(size))
        return False

    def give_back(self, call: Call, size: int) -> None:
        """Give back `size` of the bytes a call holds, dropped before its end (at most what it holds).

        Args:
            call: the call.
            size: how many bytes it no longer holds.
        """
        size = min(size, call.delivery.reserved)
        self.held -= size
        call.delivery.reserved -= size

    @contextlib.contextmanager
    def counting(self, call: Call) -> Iterator[None]:
        """Within this block (and the tasks it starts), `read_passing` counts against `call`.

        Args:
            call: the call being prepared.
        """
        token = _preparing.set((self, call))
        try:
            yield
        finally:
            _preparing.reset(token)

    def release(self, call: Call) -> None:
        """Give back every byte the call held (at its end)."""
        self.held -= call.delivery.reserved
        call.delivery.reserved = 0

    async def read_counted(self, call: Call, response: httpx.Response, send: Send) -> bytes | None:
        """The whole upstream body, counted against the in-flight limit (None: refused with 503).

        Args:
            call: the call (its `AnswerPart.upstream_headers` already read).
            response: the upstream response, headers read.
            send: the ASGI send callable (for the 503).

        Returns:
            The body's bytes, or None when the call was refused.
        """
        names = call.answer.upstream_headers
        encoded = names.get("content-encoding", "identity").strip().lower() != "identity"
        declared = names.get("content-length")
        if not encoded and declared is not None and declared.strip().isdigit():
            if not await self.reserve(call, int(declared), send):
                return None
            data = await read_whole(response, names)
            if len(data) > int(declared):
                self.reserve_nowait(call, len(data) - int(declared))  # counted even when over: it is here
            return data
        parts: list[bytes] = []
        # decoded by httpx read by read (a declared length is the encoded one): counted as it grows
        async for chunk in (response.aiter_bytes() if encoded else response.aiter_raw()):
            if not await self.reserve(call, len(chunk), send):
                return None
            parts.append(chunk)
        return b"".join(parts)


async def read_passing(response: httpx.Response) -> bytes:
    """A whole answer to one of the proxy's own calls to the server, counted while it is read.

    Inside `InflightBound.counting` the bytes count against the call being prepared as they
    arrive, and are given back once read: the caller parses and drops them before the event loop
    runs again. Elsewhere the answer is read uncounted.

    Args:
        response: the server's response, headers read (the caller closes it).

    Returns:
        The body's bytes (decoded as httpx decodes them).

    Raises:
        InflightLimitError: the bytes would pass the in-flight limit (the read stops there).
        httpx.TransportError: the server failed while the body was read.
    """
    preparing = _preparing.get()
    if preparing is None:
        return await response.aread()
    bound, call = preparing
    held = 0
    parts: list[bytes] = []
    try:
        async for chunk in response.aiter_bytes():
            if not bound.reserve_nowait(call, len(chunk)):
                raise InflightLimitError(bound.overload_message(len(chunk)))
            held += len(chunk)
            parts.append(chunk)
        return b"".join(parts)
    finally:
        bound.give_back(call, held)


async def read_whole(response: httpx.Response, names: dict[str, str]) -> bytes:
    """The whole response body; one read from the default transport when nothing needs decoding.

    Args:
        response: the upstream response, headers read.
        names: its headers by lower-case name.

    Returns:
        The body's bytes.
    """
    read_all = getattr(response.stream, "read_all", None)
    if read_all is not None and names.get("content-encoding", "identity").strip().lower() == "identity":
        return await read_all()
    return await response.aread()
