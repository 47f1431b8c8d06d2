"""One call's state, from its first byte to its record, and the facts every part of the proxy shares
about calls (the session header, body caps).

A `Call` is built by the stages of `rollout_dataset.proxy.app.ProxyApp`, each writing its own part:

- `Call.asked` (`RequestPart`): what the harness sent and what the proxy sent upstream in its place,
  written by the request reader (`proxy/intake.py`) and the rewriter (`proxy/rewrite.py`);
- `Call.answer` (`AnswerPart`): what came back and what the harness got, written by the relay
  (`proxy/relay.py`) and the stream relay (`proxy/stream_relay.py`);
- `Call.timing` (`Timing`): when the call started and its first byte went out;
- `Call.delivery` (`Delivery`): how far the answer to the harness got, and the bytes the call holds
  against the in-flight bound (`proxy/inflight.py`);
- shared by all, through two narrow methods: `Call.fail` (the first error wins) and `Call.notes`
  (appended to), and `Call.nonfinite` (set by whoever parses a body holding NaN/Infinity).

The recorder (`proxy/call_record.py`) only reads them.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import httpx

from rollout_dataset.proxy.on_policy_upstream import Prepared
from rollout_dataset.wire.anthropic_chat import ChatStreamToMessages

__all__ = ["Call", "ServedBy", "RequestPart", "AnswerPart", "Timing", "Delivery", "SESSION_HEADER", "DEFAULT_SESSION",
           "RAW_RECORD_CAP", "uuid4_hex", "spliceable"]

SESSION_HEADER = "x-rollout-session"
DEFAULT_SESSION = "default"
RAW_RECORD_CAP = 16 * 1024 * 1024  # bytes of a pass-through body kept for the record


class RequestPart:
    """The request side of a call: as received (reader) and as sent upstream (rewriter)."""

    __slots__ = ("kind", "body", "raw_body", "stream", "requested", "effective", "upstream_changes",
                 "anthropic", "translator", "upstream_request", "native_request", "on_policy")

    def __init__(self) -> None:
        self.kind: str | None = None  # the generation kind ("chat", "completions", "responses", "messages")
        self.body: Any = None  # the request as recorded (redacted)
        self.raw_body: bytes | None = None  # the request's JSON bytes, when they can go into the record as is
        self.stream = False  # the harness asked for a stream
        self.requested: dict[str, Any] = {}
        self.effective: dict[str, Any] = {}
        self.upstream_changes: dict[str, Any] = {}
        self.anthropic = False  # an Anthropic Messages call: errors in its format
        # a Messages call sent upstream as chat: its stream translator (True for a whole answer)
        self.translator: ChatStreamToMessages | bool | None = None
        self.upstream_request: Any = None  # the chat completion sent in its place
        # the Messages request as received, for an upstream with no chat endpoint
        self.native_request: httpx.Request | None = None
        self.on_policy: Prepared | None = None  # on-policy mode's decision for a chat call

    def as_received(self) -> httpx.Request:
        """Undo the Messages → chat rewrite: the upstream has no chat endpoint (not vLLM).

        The call is then forwarded as it came and recorded at level ``text`` (kind ``messages``).

        Returns:
            The Messages request as the harness sent it (the `httpx.Request` the rewriter kept).
        """
        request = self.native_request
        assert request is not None, "only a Messages call sent as chat has a request as received"
        self.translator = self.upstream_request = self.native_request = None
        self.kind = "messages"
        self.upstream_changes, self.effective = {}, dict(self.requested)
        return request


class AnswerPart:
    """The answer side of a call: what the upstream sent and what the harness got (the relays)."""

    __slots__ = ("status", "event_stream", "body", "raw_body", "upstream_headers", "translated")

    def __init__(self) -> None:
        self.status: int | None = None
        self.event_stream = False  # the upstream answered with an event stream (asked to or not)
        self.body: Any = None  # the answer as recorded (a reassembled stream, or text)
        self.raw_body: bytes | None = None  # the answer's JSON bytes, when they can go into the record as is
        self.upstream_headers: dict[str, str] = {}  # the upstream's response headers (lower-case names)
        self.translated: Any = None  # the Messages answer the harness got (the record's `response`)


class Timing:
    """When the call started (wall clock and monotonic) and when its first answer byte went out."""

    __slots__ = ("started_at", "t0", "ttft_ms")

    def __init__(self) -> None:
        self.started_at = time.time()
        self.t0 = time.perf_counter()
        self.ttft_ms: float | None = None

    def first_byte(self) -> None:
        """Note the time to the first answer byte (once)."""
        if self.ttft_ms is None:
            self.ttft_ms = (time.perf_counter() - self.t0) * 1000.0


class Delivery:
    """How far the answer to the harness got, and the bytes held against the in-flight bound."""

    __slots__ = ("started", "ended", "whole", "client_gone", "recorded", "reserved")

    def __init__(self) -> None:
        self.started = False  # response headers sent to the harness
        self.ended = False  # the response's last byte sent
        self.whole = False  # the answer's final event was handed to the harness (it may leave then)
        self.client_gone = False
        self.recorded = False
        self.reserved = 0  # bytes of this call counted against the proxy's in-flight limit


class ServedBy:
    """The upstream that serves a call (`rollout_dataset.proxy.upstream_pool`), and a move that led there.

    Args:
        index: the upstream's position in the proxy's list.
        url: its URL as it may be printed (redacted).
        moved_from: the upstream the session left for this call (it was unhealthy), or None.
        moved_because: why it was left (its health check's or the failed call's message).
    """

    __slots__ = ("index", "url", "moved_from", "moved_because")

    def __init__(self, index: int, url: str, moved_from: str | None = None, moved_because: str | None = None) -> None:
        self.index = index
        self.url = url
        self.moved_from = moved_from
        self.moved_because = moved_because

    def as_record(self) -> dict[str, Any]:
        """The record's ``model_server`` object (schema ``trace_record``)."""
        return {"url": self.url, "moved_from": self.moved_from, "moved_because": self.moved_because}


class Call:
    """Everything known about one call, until it becomes a record.

    Args:
        session: the session the call belongs to.
        method: the HTTP method.
        endpoint: the path below the session prefix.
        headers: the request headers as recorded (`rollout_dataset.proxy.redact.recorded_headers`).
    """

    __slots__ = ("session", "index", "call_id", "method", "endpoint", "headers", "notes", "error", "nonfinite",
                 "asked", "answer", "timing", "delivery", "served", "record_server")

    def __init__(self, session: str, method: str, endpoint: str, headers: dict[str, str]) -> None:
        self.session = session
        self.index = -1
        self.call_id = uuid4_hex()
        self.timing = Timing()
        self.method = method
        self.endpoint = endpoint
        self.headers = headers
        self.notes: list[str] = []
        self.error: dict[str, str] | None = None
        self.nonfinite = False  # a parsed body held NaN/Infinity: the record is encoded by the standard library
        self.asked = RequestPart()
        self.answer = AnswerPart()
        self.delivery = Delivery()
        self.served: ServedBy | None = None  # the upstream serving it (set once the session is placed)
        self.record_server = False  # write `served` into the record (the proxy has several upstreams)

    def fail(self, kind: str, message: str) -> None:
        """Record the call's first error; a later one of another kind is kept as a note.

        The first error is the record's `error` (later ones are usually its consequences); a later
        failure of another kind (a 400 whose body then breaks off) is noted, so no failure goes
        unnamed.

        Args:
            kind: the error kind (``upstream_status``, ``client_disconnect``, ...).
            message: one line naming what failed.
        """
        if self.error is None:
            self.error = {"kind": kind, "message": message}
        elif kind != self.error["kind"]:
            self.notes.append(f"then {kind}: {message}")


class _RandomPool:
    """`os.urandom` bytes fetched 4 KiB at a time (one system call per 256 call ids, not one per call).

    Taken under a lock (proxies may run in several threads of one process), and emptied in a forked
    child (`os.register_at_fork`), so no two calls are handed the same bytes.
    """

    SIZE = 4096

    def __init__(self) -> None:
        self.data = b""
        self.at = 0
        self.lock = threading.Lock()
        os.register_at_fork(after_in_child=self.clear)

    def clear(self) -> None:
        """Forget the bytes fetched (a forked child fetches its own)."""
        self.data, self.at = b"", 0
        self.lock = threading.Lock()

    def take16(self) -> bytearray:
        """16 fresh random bytes, never handed out before."""
        with self.lock:
            at = self.at
            if at + 16 > len(self.data):
                self.data, at = os.urandom(self.SIZE), 0
            self.at = at + 16
            return bytearray(self.data[at:at + 16])


_RANDOM = _RandomPool()


def uuid4_hex() -> str:
    """A random (version 4) UUID as 32 hex digits, as ``uuid.uuid4().hex`` gives (from `os.urandom`, as
    `uuid.uuid4`), at a fraction of its cost."""
    raw = _RANDOM.take16()
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()

def spliceable(data: bytes) -> bool:
    """Whether JSON bytes can be spliced into a trace line verbatim: one line, UTF-8, an object."""
    head = data[:4]
    if not (head[:1] == b"{" and b"\x00" not in head and b"\n" not in data and b"\r" not in data):
        return False
    if b"\xed" in data:  # maybe an encoded lone surrogate (parsed with surrogatepass): strict UTF-8 only
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True
