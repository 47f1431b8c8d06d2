"""Run an async context manager (a server: the local backend, the proxy) on its own event-loop thread.

The capture is synchronous (harnesses are subprocesses or blocking HTTP loops); the servers are
asyncio. `serve_in_thread` enters the async context manager on a private loop in a daemon thread,
hands the entered object back, and exits it cleanly when the `with` block ends.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from typing import Any, AsyncContextManager, Callable, Iterator, TypeVar

__all__ = ["serve_in_thread"]

T = TypeVar("T")


@contextmanager
def serve_in_thread(factory: Callable[[], AsyncContextManager[T]], *, name: str = "server",
                    start_timeout_s: float = 60.0, stop_timeout_s: float = 30.0) -> Iterator[T]:
    """Enter `factory()` on a private event loop in a thread; exit it when the block ends.

    Args:
        factory: builds the async context manager (called on the thread).
        name: thread name (for logs).
        start_timeout_s: how long to wait for it to start.
        stop_timeout_s: how long to wait for it to stop.

    Yields:
        What the async context manager's ``__aenter__`` returned.

    Raises:
        TimeoutError: it did not start in time.
        Exception: whatever starting it raised.
    """
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}
    stop_event: list[asyncio.Event] = []

    async def main() -> None:
        stop = asyncio.Event()
        stop_event.append(stop)
        try:
            async with factory() as obj:
                box["obj"] = obj
                started.set()
                await stop.wait()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
            started.set()

    def target() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    if not started.wait(start_timeout_s):
        raise TimeoutError(f"{name} did not start within {start_timeout_s:g} s")
    if "error" in box:
        thread.join(stop_timeout_s)
        raise box["error"]
    try:
        yield box["obj"]
    finally:
        try:
            loop.call_soon_threadsafe(stop_event[0].set)
        except RuntimeError:  # the loop already ended
            pass
        thread.join(stop_timeout_s)
