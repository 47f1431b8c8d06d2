"""`rollout-dataset view PATH`: a read-only local web viewer of artifact folders or a built dataset.

Serves the index (every rollout, sortable, filterable, grouped by group_id) and one page per rollout
(header, token view, conversation, prefix graph, per-call details, Crafter decisions, audit) on
loopback, and prints the URL. ``--export OUT`` writes a self-contained static copy instead.
"""

from __future__ import annotations

from typing import Any

import argparse
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("path", metavar="PATH", help="an artifact folder, a tree of them, or a built dataset folder")
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to bind (default 127.0.0.1, loopback only; 0.0.0.0 shows the rollouts to the network)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default 0: a free port)")
    parser.add_argument("--export", metavar="OUT", default=None,
                        help="write a self-contained static copy (HTML, data, assets) to the new folder OUT and exit")


def run(args: argparse.Namespace) -> int:
    """Serve the viewer until Ctrl-C, or write the export.

    Args:
        args: the parsed arguments.

    Returns:
        0 when done, 1 when PATH holds no rollout or the address/OUT cannot be used, 2 for a bad port.
    """
    from rollout_dataset.cli.reporting import bind_failure
    from rollout_dataset.errors import ArtifactError

    if not 0 <= args.port <= 65535:
        print(f"error: --port must be in [0, 65535], got {args.port}", file=sys.stderr)
        return 2
    try:
        if args.export is not None:
            from rollout_dataset.viewer.export import export_static

            out = export_static(args.path, args.export)
            print(f"exported {out['rollouts']} rollouts to {out['folder']}: open {out['index']}")
            return 0
        import ipaddress

        from rollout_dataset.viewer.server import serve_viewer

        try:
            loopback = ipaddress.ip_address(args.host).is_loopback
        except ValueError:
            loopback = args.host == "localhost"
        if not loopback:
            print(f"warning: --host {args.host} is not loopback: anyone who reaches it can read these rollouts",
                  file=sys.stderr)

        def ready(server: Any) -> None:
            print(f"viewer of {args.path} at {server.url}  (Ctrl-C stops it)", flush=True)

        serve_viewer(args.path, args.host, args.port, on_ready=ready)
        return 0
    except (ArtifactError, FileExistsError, OSError) as exc:
        failed = bind_failure(exc, args.host, args.port)
        if failed is not None:
            return failed
        # an OSError(errno, text) prints as "[Errno N] text": the text alone names the address
        print(f"error: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}", file=sys.stderr)
        return 1
