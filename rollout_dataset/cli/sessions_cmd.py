"""`rollout-dataset sessions TRACE_DIR --out DIR`: a proxy's sealed sessions as artifact folders.

Every session sealed through the proxy's session API (docs/session-api.md) becomes
``DIR/<rollout_id>/``, an artifact folder `validate` accepts and `build` turns into rows (its posted
reward is the rollout's ``env_reward``). Open sessions are left out and named; a session whose trace
no longer matches its seal is one ``error:`` line and exit 1.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("trace_dir", metavar="TRACE_DIR", help="the proxy's --trace-dir")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write one artifact folder per sealed session into")
    parser.add_argument("--tokenizer", default=None, metavar="NAME",
                        help="the tokenizer the proxy's --session-api-tokenizer named (same findings; named in task.json)")


def run(args: argparse.Namespace) -> int:
    """Write every sealed session.

    Args:
        args: the parsed arguments.

    Returns:
        0 when every sealed session was written (open ones are named on stderr), 1 on a session whose
        trace fails its seal, 2 when TRACE_DIR is not a folder.
    """
    from pathlib import Path

    from rollout_dataset.capture.session_artifacts import session_rollout_id, write_session_artifacts
    from rollout_dataset.cli.reporting import EXIT_FAILED, EXIT_USAGE, report_error
    from rollout_dataset.errors import RolloutDatasetError
    from rollout_dataset.proxy.session_state import SessionFiles

    if not Path(args.trace_dir).is_dir():
        return report_error(f"{args.trace_dir}: not a folder (give the proxy's --trace-dir)", EXIT_USAGE)
    files = SessionFiles(args.trace_dir)
    written, still_open = 0, []
    for session in files.sessions():
        if not files.is_sealed(session):
            still_open.append(session)
            continue
        try:
            write_session_artifacts(args.trace_dir, session, Path(args.out) / session_rollout_id(session),
                                    tokenizer=args.tokenizer)
        except (RolloutDatasetError, OSError, ValueError) as exc:
            return report_error(f"session {session}: {exc}", EXIT_FAILED)
        written += 1
    if still_open:
        shown = ", ".join(still_open[:10]) + (f" and {len(still_open) - 10} more" if len(still_open) > 10 else "")
        print(f"left out {len(still_open)} open session(s): {shown}", file=sys.stderr)
    print(f"{args.out}: {written} sealed session(s) written as artifact folders")
    return 0
