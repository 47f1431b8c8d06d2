"""`rollout-dataset proxy`: run the recording proxy until Ctrl-C.

Prints the base URL once the proxy listens (one line, flushed), so scripts can read it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's options.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("--upstream", required=True, help="model server base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--trace-dir", required=True, help="directory for the <session>.jsonl trace files")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default 0: any free port)")
    parser.add_argument("--upstream-timeout", type=float, default=600.0,
                        help="seconds to wait for the model server's answer and between stream chunks")
    parser.add_argument("--max-body-mb", type=float, default=64.0, help="largest request body accepted, in MiB")
    parser.add_argument("--on-policy", action="store_true", help="on-policy mode: multi-turn chat prompts are built from the ids the model sampled (vLLM >= 0.32 or the local backend; see README 'On-policy mode')")


async def _serve(args: argparse.Namespace) -> None:
    from rollout_dataset.proxy import CaptureProxy

    proxy = CaptureProxy(upstream=args.upstream, trace_dir=args.trace_dir, host=args.host, port=args.port,
                         upstream_timeout=args.upstream_timeout, max_body_bytes=int(args.max_body_mb * 1024 * 1024),
                         on_policy=args.on_policy)
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
        0 after a clean stop.

    Raises:
        ValueError: the upstream URL is not http(s).
        OSError: the address cannot be bound.
    """
    import logging

    from rollout_dataset.proxy.server import new_event_loop

    if not getattr(args, "verbose", 0) or args.verbose < 2:  # one INFO line per forwarded call is too much
        logging.getLogger("httpx").setLevel(logging.WARNING)
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(args))
    finally:
        loop.close()
    return 0
