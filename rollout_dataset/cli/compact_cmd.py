"""`rollout-dataset compact DIR` / `compact --repo org/name`: merge small parquet shards per config.

Locally the swap is atomic per config (a killed compact leaves a loadable dataset); on the Hub it
is one commit on the revision read, retried when a pusher committed in between.
"""

from __future__ import annotations

import argparse
import math

__all__ = ["add_arguments", "run"]


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 256MB, 64M or 1000000") from None
    if not math.isfinite(value) or value < 1:  # 1e999 and nan parse as floats; 0.5 would be 0 bytes
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite size of at least 1 byte")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments.

    Args:
        parser: the sub-command's parser.
    """
    from rollout_dataset.builder.compaction import DEFAULT_TARGET_BYTES

    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("dataset", nargs="?", metavar="DIR", help="a local dataset folder written by `build`")
    where.add_argument("--repo", help="a Hub dataset repo id org/name (one commit, safe against racing pushes)")
    parser.add_argument("--target-size", type=_size, default=DEFAULT_TARGET_BYTES, metavar="SIZE",
                        help=f"size goal of a merged shard, e.g. 256MB (default {DEFAULT_TARGET_BYTES // 2**20}MB)")
    parser.add_argument("--endpoint", default=None, help="Hub URL (default: $HF_ENDPOINT or huggingface.co)")


def run(args: argparse.Namespace) -> int:
    """Compact, print shards before -> after per config.

    Args:
        args: the parsed arguments.

    Returns:
        0 on success, 1 on bad input or a refused commit.
    """
    from rollout_dataset.builder.compaction import compact_local
    from rollout_dataset.cli.reporting import EXIT_FAILED, report_error
    from rollout_dataset.hub import compact_repo
    from rollout_dataset.errors import RolloutDatasetError

    try:
        if args.repo:
            result = compact_repo(args.repo, endpoint=args.endpoint, target_bytes=args.target_size)
        else:
            result = compact_local(args.dataset, target_bytes=args.target_size)
    except (RolloutDatasetError, ValueError, OSError) as exc:
        return report_error(exc, EXIT_FAILED)
    for config, before in result.shards_before.items():
        after = result.shards_after.get(config, before)
        dups = result.duplicate_rows.get(config, 0)
        print(f"{config}: {before} -> {after} shards" + (f" ({dups} duplicate rows dropped)" if dups else ""))
    if args.repo:
        print(f"{args.repo}: " + (f"commit {result.commit[:12]} ({result.attempts} attempt(s))" if result.commit
                                  else "nothing to compact"))
    return 0
