"""Run an async context manager (a server: the local backend, the proxy) on its own event-loop thread.

The capture is synchronous (harnesses are subprocesses or blocking HTTP loops); the servers are
asyncio. `serve_in_thread` is `rollout_dataset.serving.serve_in_thread` (the one server runner of
the package), kept here for the capture's callers.
"""

from __future__ import annotations

from rollout_dataset.serving import serve_in_thread

__all__ = ["serve_in_thread"]
