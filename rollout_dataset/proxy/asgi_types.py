"""The ASGI callable types the proxy's modules share."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

__all__ = ["Scope", "Receive", "Send"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
