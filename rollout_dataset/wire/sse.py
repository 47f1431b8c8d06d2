"""Server-sent events: the one framing rule for what this package sends, decoding through httpx-sse.

Every event stream the package writes (the local backend's chat, Responses and Messages streams, the
proxy's re-framed and error events) is framed by `encode_event`, the way vLLM frames its own: an
``event:`` line when the event has a name, one ``data:`` line per line of data, a blank line. Every
stream the package reads whole (a recorded Messages stream, the backend's own chat stream turned into
Messages events) is decoded by `iter_events` / `aiter_events`, which hand the bytes to httpx-sse's
public `EventSource`: nothing here parses event streams by hand.

Pure: no server, no I/O beyond the bytes handed in.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent

__all__ = ["DONE", "aiter_events", "encode_event", "encode_json_event", "iter_events"]

DONE = "[DONE]"
"""The data of the last event of an OpenAI-style chat or completions stream."""

_EVENT_STREAM = {"content-type": "text/event-stream"}


def encode_event(data: str | bytes, event: str | None = None, event_id: str | None = None) -> bytes:
    """One event's bytes, framed as vLLM frames them.

    Args:
        data: the event's data; a multi-line value becomes one ``data:`` line per line.
        event: the event's name (``event:`` line); None or ``"message"`` (the default name) writes none.
        event_id: the event's ``id:`` line, when it has one.

    Returns:
        The UTF-8 bytes of the event, ending with the blank line.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if not event_id and (not event or event == "message") and b"\n" not in raw:
        return b"data: " + raw + b"\n\n"  # the common case: one copy, no decode
    head = b""
    if event and event != "message":
        head += b"event: " + event.encode("utf-8") + b"\n"
    if event_id:
        head += b"id: " + event_id.encode("utf-8") + b"\n"
    body = b"".join(b"data: " + line + b"\n" for line in raw.split(b"\n"))
    return head + body + b"\n"


def encode_json_event(value: Any, event: str | None = None) -> bytes:
    """An event whose data is ``value`` as compact JSON (non-ASCII kept), framed by `encode_event`.

    Args:
        value: any JSON-serialisable value.
        event: the event's name, if any.

    Returns:
        The event's bytes.
    """
    return encode_event(json.dumps(value, ensure_ascii=False, separators=(",", ":")), event)


def iter_events(body: str | bytes) -> Iterator[ServerSentEvent]:
    """The events of a whole event stream, decoded by httpx-sse.

    Args:
        body: the stream's bytes (or text), as it came.

    Returns:
        An iterator over the events, in order (comments and retry lines dropped, as the SSE spec says).
    """
    content = body.encode("utf-8") if isinstance(body, str) else body
    return EventSource(httpx.Response(200, headers=_EVENT_STREAM, content=content)).iter_sse()


async def aiter_events(chunks: AsyncIterable[str | bytes]) -> AsyncIterator[ServerSentEvent]:
    """The events of a stream that arrives in pieces, each yielded as soon as it is complete.

    Args:
        chunks: the stream's pieces, split anywhere (inside an event, a line or a UTF-8 character).

    Yields:
        Each event, decoded by httpx-sse.
    """
    async def as_bytes() -> AsyncIterator[bytes]:
        async for chunk in chunks:
            yield chunk.encode("utf-8") if isinstance(chunk, str) else chunk

    response = httpx.Response(200, headers=_EVENT_STREAM, content=as_bytes())
    async for event in EventSource(response).aiter_sse():
        yield event
