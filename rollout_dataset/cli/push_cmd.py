"""`rollout-dataset push DATASET_DIR --repo org/name`: append-safe upload to the Hugging Face Hub.

The token comes from ``HF_TOKEN`` (or huggingface_hub's saved login); it is never printed.
"""

from __future__ import annotations

import argparse
import os

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("dataset", metavar="DATASET_DIR", help="a folder written by `rollout-dataset build`")
    parser.add_argument("--repo", default=os.environ.get("PUSH_TO_DATASET"),
                        help="dataset repo id org/name (default: $PUSH_TO_DATASET)")
    parser.add_argument("--private", action="store_true", default=None,
                        help="create the repo private if it does not exist (also PUSH_PRIVATE=1)")
    parser.add_argument("--endpoint", default=None, help="Hub URL (default: $HF_ENDPOINT or huggingface.co)")
    parser.add_argument("--traces-repo", default=None,
                        help="companion repo of the trace-viewer sessions (default: REPO-traces)")
    parser.add_argument("--no-traces", action="store_true", help="push the parquet dataset only, not the sessions")
    parser.add_argument("--no-compact", action="store_true",
                        help="do not compact the repo after the push (by default it is compacted when a config "
                             "holds more than rollout_dataset.hub.AUTO_COMPACT_SHARDS = 64 shards)")


def run(args: argparse.Namespace) -> int:
    """Push, print what landed.

    Args:
        args: the parsed arguments.

    Returns:
        0 on success, 1 on bad input or a refused push, 2 without a repo id.
    """
    from rollout_dataset.errors import RolloutDatasetError
    from rollout_dataset.hub import push

    if not args.repo:
        print("error: give --repo org/name (or set PUSH_TO_DATASET)")
        return 2
    private = args.private
    if private is None and os.environ.get("PUSH_PRIVATE", "").strip().lower() in ("1", "true", "yes"):
        private = True
    try:
        result = push(args.dataset, args.repo, private=private, endpoint=args.endpoint,
                      traces_repo=getattr(args, "traces_repo", None), traces=not getattr(args, "no_traces", False),
                      compact_above=0 if args.no_compact else None)
    except (RolloutDatasetError, ValueError) as exc:
        print(f"error: {exc}")
        return 1
    if result.traces_repo:
        print(f"{result.traces_repo}: {result.sessions_added} trace-viewer session(s) added")
    if result.commit is None:
        print(f"{result.repo_id}: nothing new ({len(result.skipped)} rollouts already there, "
              f"{result.total_rollouts} in total)")
    else:
        print(f"{result.url}: {len(result.added)} rollouts added, {len(result.skipped)} already there, "
              f"{result.total_rollouts} in total (commit {result.commit[:12]}, {result.attempts} attempt(s))")
    return 0
