"""`rollout-dataset proxy`: run the recording proxy until Ctrl-C.

Prints the base URL once the proxy listens (one line, flushed), so scripts can read it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's options.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("--upstream", required=True,
                        help="model server base URL, e.g. http://127.0.0.1:8000/v1; user:pass@ (Basic) or token@ "
                             "(Bearer) and ?query credentials are sent upstream only, never printed or recorded")
    parser.add_argument("--trace-dir", required=True, help="directory for the <session>.jsonl trace files")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default 0: any free port)")
    parser.add_argument("--upstream-timeout", type=float, default=600.0,
                        help="seconds to wait for the model server's answer and between stream chunks")
    parser.add_argument("--max-body-mb", type=float, default=64.0, help="largest request body accepted, in MiB")
    parser.add_argument("--api-key-env", default=None, metavar="VAR",
                        help="read the real upstream key from environment variable VAR (e.g. OPENAI_API_KEY) and "
                             "send it upstream in place of the harness's Authorization (the harness then only "
                             "needs a dummy key); the key itself is never a flag")


def _api_key(variable: str | None) -> str | None:
    """The upstream key from the named environment variable (None when no variable is named).

    Raises:
        ValueError: the variable is named but unset or empty.
    """
    if not variable:
        return None
    value = os.environ.get(variable)
    if not value:
        raise ValueError(f"--api-key-env {variable}: the environment variable {variable} is not set")
    return value


async def _serve(args: argparse.Namespace) -> None:
    from rollout_dataset.proxy import CaptureProxy

    proxy = CaptureProxy(upstream=args.upstream, trace_dir=args.trace_dir, host=args.host, port=args.port,
                         upstream_timeout=args.upstream_timeout, max_body_bytes=int(args.max_body_mb * 1024 * 1024),
                         api_key=_api_key(args.api_key_env))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    async with proxy:
        # uvicorn installs its own handlers while serving; route them to our stop event too.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(stop.set))
        print(proxy.base_url, flush=True)
        print(f"recording to {proxy.trace_dir} (one <session>.jsonl per session); Ctrl-C stops",
              file=sys.stderr, flush=True)
        await stop.wait()


def run(args: argparse.Namespace) -> int:
    """Run the proxy until interrupted.

    Args:
        args: the parsed options.

    Returns:
        0 after a clean stop, 2 for a bad upstream URL or key variable.

    Raises:
        OSError: the address cannot be bound.
    """
    import logging

    from rollout_dataset.proxy.server import new_event_loop

    if not getattr(args, "verbose", 0) or args.verbose < 2:  # one INFO line per forwarded call is too much
        logging.getLogger("httpx").setLevel(logging.WARNING)
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(args))
    except ValueError as exc:  # a bad --upstream or --api-key-env: the message shows the URL redacted
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        loop.close()
    return 0
