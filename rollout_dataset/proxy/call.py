"""One call's state, from its first byte to its record, and the facts every part of the proxy shares
about calls (the session header, body caps).
"""

from __future__ import annotations

import os
import time
from typing import Any

from rollout_dataset.proxy.on_policy_upstream import Prepared

__all__ = ["Call", "SESSION_HEADER", "DEFAULT_SESSION", "RAW_RECORD_CAP", "uuid4_hex", "spliceable"]

SESSION_HEADER = "x-rollout-session"
DEFAULT_SESSION = "default"
RAW_RECORD_CAP = 16 * 1024 * 1024  # bytes of a pass-through body kept for the record


class Call:
    """Everything known about one call, until it becomes a record."""

    __slots__ = ("session", "index", "call_id", "started_at", "t0", "method", "endpoint", "stream", "status",
                 "headers", "request", "upstream_changes", "requested", "effective", "response", "ttft_ms",
                 "notes", "error", "kind", "recorded", "client_gone", "raw_request", "raw_response",
                 "nonfinite", "reserved", "started", "ended", "on_policy", "upstream_headers", "anthropic",
                 "translator", "translated", "upstream_request", "native_request")

    def __init__(self, session: str, method: str, endpoint: str, headers: dict[str, str]) -> None:
        self.session = session
        self.index = -1
        self.call_id = uuid4_hex()
        self.started_at = time.time()
        self.t0 = time.perf_counter()
        self.method = method
        self.endpoint = endpoint
        self.stream = False
        self.status: int | None = None
        self.headers = headers
        self.request: Any = None
        self.upstream_changes: dict[str, Any] = {}
        self.requested: dict[str, Any] = {}
        self.effective: dict[str, Any] = {}
        self.response: Any = None
        self.ttft_ms: float | None = None
        self.notes: list[str] = []
        self.error: dict[str, str] | None = None
        self.kind: str | None = None
        self.recorded = False
        self.client_gone = False
        self.raw_request: bytes | None = None  # the request's JSON bytes, when they can go into the record as is
        self.raw_response: bytes | None = None
        self.nonfinite = False  # a parsed body held NaN/Infinity: the record is encoded by the standard library
        self.reserved = 0  # bytes of this call counted against the proxy's in-flight limit
        self.started = False  # response headers sent to the harness
        self.ended = False  # the response's last byte sent
        self.on_policy: Prepared | None = None  # on-policy mode's decision for a chat call
        self.upstream_headers: dict[str, str] = {}  # the upstream's response headers (lower-case names)
        self.anthropic = False  # an Anthropic Messages call: errors in its format
        self.translator: Any = None  # a Messages call sent upstream as chat: its stream translator (or True)
        self.translated: Any = None  # the Messages answer the harness got (the record's `response`)
        self.upstream_request: Any = None  # the chat completion sent in its place
        self.native_request: Any = None  # the Messages request as received, for an upstream with no chat endpoint

    def fail(self, kind: str, message: str) -> None:
        """Record the call's first error (later ones are consequences of it)."""
        if self.error is None:
            self.error = {"kind": kind, "message": message}


def uuid4_hex() -> str:
    """A random (version 4) UUID as 32 hex digits, as ``uuid.uuid4().hex`` gives, at a quarter of its cost."""
    raw = bytearray(os.urandom(16))
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
