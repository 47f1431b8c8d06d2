"""Serve the viewer on loopback: an async context manager for tests, a blocking `serve_viewer` for the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from rollout_dataset.server_runner import UvicornServer, bind_socket, new_event_loop
from rollout_dataset.viewer.app import build_app
from rollout_dataset.viewer.sources import RolloutSource, open_source

__all__ = ["ViewerServer", "viewer_server", "serve_viewer"]


class ViewerServer:
    """A running viewer: its source and URL.

    Args:
        source: the rollout source.
        server: the uvicorn server serving it.
        host: the bound interface.
    """

    def __init__(self, source: RolloutSource, server: UvicornServer, host: str) -> None:
        self.source = source
        self.server = server
        self.host = host

    @property
    def url(self) -> str:
        """The index page's URL (``http://HOST:PORT/``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.server.port}/"


@contextlib.asynccontextmanager
async def viewer_server(path: str | Path, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[ViewerServer]:
    """Serve PATH's viewer while the block runs.

    Args:
        path: an artifact folder, a tree of them, or a dataset folder.
        host: the interface (loopback by default).
        port: the port (0: a free one).

    Yields:
        The running `ViewerServer`.

    Raises:
        ArtifactError: PATH holds no rollout.
        OSError: the address cannot be bound.
    """
    source = open_source(path)
    server = UvicornServer(build_app(source, host), bind_socket(host, port, what="the viewer"))
    await server.start()
    try:
        yield ViewerServer(source, server, host)
    finally:
        await server.stop(timeout=5)


def serve_viewer(path: str | Path, host: str = "127.0.0.1", port: int = 0,
                 on_ready: Callable[[ViewerServer], Any] | None = None) -> None:
    """Serve PATH's viewer until SIGINT/SIGTERM.

    Args:
        path: as for `viewer_server`.
        host: the interface.
        port: the port.
        on_ready: called with the running server once it accepts connections (the CLI prints its URL).

    Raises:
        ArtifactError: PATH holds no rollout.
        OSError: the address cannot be bound.
    """
    loop = new_event_loop()

    async def main() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        async with viewer_server(path, host, port) as running:
            if on_ready is not None:
                on_ready(running)
            await stop.wait()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
