"""The recording proxy: forwards an OpenAI-compatible API to a model server and records every call.

Public API:
    `CaptureProxy` — run the proxy (``async with`` or, for sync callers, ``with`` / `start_in_thread`).
    `read_trace` — read a `<session>.jsonl` trace file (a crash-truncated last line is dropped; the
        hash chain, and with ``seal=`` the proxy's seal, are checked).
    `ProxyApp` — the ASGI application itself, for embedding.
    `SESSION_HEADER`, `DEFAULT_SESSION` — how calls are assigned to trace files.
"""

from __future__ import annotations

from rollout_dataset.proxy.app import DEFAULT_MAX_BODY_BYTES, DEFAULT_SESSION, SESSION_HEADER, ProxyApp
from rollout_dataset.proxy.recorder import TraceRecorder, read_trace
from rollout_dataset.proxy.server import CaptureProxy

__all__ = [
    "CaptureProxy",
    "read_trace",
    "ProxyApp",
    "TraceRecorder",
    "SESSION_HEADER",
    "DEFAULT_SESSION",
    "DEFAULT_MAX_BODY_BYTES",
]
