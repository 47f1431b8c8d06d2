#!/usr/bin/env python3
"""Capture ONE rollout and write it out as a readable artifact folder.

The same command as `rollout-dataset capture`, with the same flags; see `--help`.
"""

import argparse
import logging
import sys

from rollout_dataset.cli import capture_cmd


def main(argv: list[str] | None = None) -> int:
    """Parse the flags and run the capture.

    Args:
        argv: arguments (default: the command line).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description="Capture one rollout and write its artifacts.")
    capture_cmd.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return capture_cmd.run(args)


if __name__ == "__main__":
    sys.exit(main())
