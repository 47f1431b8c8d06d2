"""`rollout-dataset validate PATH...`: check artifact files, folders or trees against their schemas.

Prints one line per failure on stdout, ``file: json.path: reason`` (the command's findings, as a
linter prints them), then ``error: N failure(s) ...`` on stderr and exits 1; a path that does not
exist is ``error: PATH: no such file or folder`` on stderr, exit 2; prints a one-line OK otherwise. Corrupt files (not UTF-8, not JSON, nested
too deeply, a folder in place of a file, a symlink leaving its folder) are failures, never a
traceback; a folder holding artifact files without `summary.json` (or any other) fails.
"""

from __future__ import annotations

import argparse

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="an artifact file (trace.json, turns.json, ...), an artifact folder, or a tree of them")


def run(args: argparse.Namespace) -> int:
    """Validate every path and print the failures.

    Args:
        args: parsed arguments (`paths`).

    Returns:
        0 when everything is valid, 1 on any failure, 2 when a path is missing.
    """
    from rollout_dataset.cli.reporting import EXIT_FAILED, EXIT_USAGE, report_error
    from rollout_dataset.schema.check import format_failure, validate_path

    failures = []
    for path in args.paths:
        try:
            failures.extend(validate_path(path))
        except FileNotFoundError as exc:
            return report_error(exc, EXIT_USAGE)
    for failure in failures:
        print(format_failure(failure))
    if failures:
        files = len({failure[0] for failure in failures})
        return report_error(f"{len(failures)} failure(s) in {files} file(s) (listed on stdout)", EXIT_FAILED)
    print(f"OK: {', '.join(args.paths)}")
    return 0
