"""`rollout-dataset audit PATH`: re-score captured logprobs with the server or a transformers model."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for annotations only; imported lazily where used
    from rollout_dataset.audit.scorers import Scorer

import argparse
import logging
import sys
from pathlib import Path

__all__ = ["add_arguments", "run"]

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the audit flags."""
    parser.add_argument("path", help="an artifact folder, a tree of them, or a built dataset folder")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--against", metavar="URL", help="score with this server's prompt_logprobs (OpenAI base URL, "
                     "e.g. http://127.0.0.1:8000/v1)")
    who.add_argument("--model", metavar="PATH|HUB_ID", help="score with a transformers forward pass of this model "
                     "(needs torch: pip install 'rollout-dataset[audit]')")
    parser.add_argument("--served-model", help="with --against: the served model name (default: the first of /v1/models)")
    parser.add_argument("--device", default="cpu", help="with --model: torch device (default cpu)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="with --model: weights dtype (default float32)")
    parser.add_argument("--batch-size", type=int, default=4, help="sequences per forward pass / requests in flight "
                        "(default 4)")
    parser.add_argument("--worst", type=int, default=10, help="worst positions kept per rollout (default 10)")
    parser.add_argument("--max-mean-abs-diff", type=float, metavar="X", help="exit 1 when a rollout's mean |Δ| is "
                        "over X (one line naming it)")
    parser.add_argument("--no-write", action="store_true", help="print the summary only; write no audit.json / config")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _scorer(args: argparse.Namespace) -> Scorer:
    from rollout_dataset.audit.scorers import ServerScorer, TransformersScorer

    if args.against:
        return ServerScorer(args.against, args.served_model, concurrency=args.batch_size)
    return TransformersScorer(args.model, device=args.device, dtype=args.dtype, batch_size=args.batch_size)


def run(args: argparse.Namespace) -> int:
    """Run the audit.

    Returns:
        0 done, 1 failed (or a rollout over --max-mean-abs-diff), 2 usage.
    """
    from rollout_dataset.audit.metrics import TokenDiffs, summarize
    from rollout_dataset.audit.readers import is_dataset
    from rollout_dataset.audit.run import audit
    from rollout_dataset.audit.writers import (AuditConfigWriter, card_statement, read_card, write_audit_json,
                                               write_card_statement)
    from rollout_dataset.errors import RolloutDatasetError

    if args.batch_size < 1 or args.worst < 0:
        print("error: --batch-size must be >= 1 and --worst >= 0", file=sys.stderr)
        return 2
    if args.max_mean_abs_diff is not None and not args.max_mean_abs_diff >= 0:
        print("error: --max-mean-abs-diff must be a number >= 0", file=sys.stderr)
        return 2
    path = Path(args.path)
    try:
        scorer = _scorer(args)
        dataset = is_dataset(path)
        if dataset and not args.no_write:
            read_card(path)  # a corrupt card fails the audit before any shard is written
        writer = AuditConfigWriter(path) if dataset and not args.no_write else None
        overall, n, n_nc, over, flagged = TokenDiffs(), 0, 0, [], []
        for result in audit(path, scorer, worst_k=args.worst, progress=not args.no_progress):
            doc = result.doc
            n += 1
            n_nc += len(doc["not_comparable"])
            overall.extend(result.diffs)
            if writer is not None:
                writer.add(doc)
            elif result.rollout.folder is not None and not args.no_write:
                write_audit_json(result.rollout.folder, doc)
            s = doc["summary"]
            if doc["findings"]:
                flagged.append(doc)
            if args.max_mean_abs_diff is not None and s["tokens_scored"] and s["mean_abs_diff"] > args.max_mean_abs_diff:
                over.append(doc)
        summary = summarize(overall)
        if writer is not None:
            writer.close()
            write_card_statement(path, card_statement(summary, scorer, n, n_nc))
    except RolloutDatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    q = summary["ratio_quantiles"]
    print(f"audit: {n} rollouts, {summary['tokens_scored']} tokens scored by {scorer.kind} ({scorer.model}"
          f"{', ' + scorer.dtype if scorer.dtype else ''}); mean |Δ| {summary['mean_abs_diff']:.3g}, "
          f"max {summary['max_abs_diff']:.3g}; over 1e-3/1e-2/1e-1: {summary['share_over_1e-3']:.3g}/"
          f"{summary['share_over_1e-2']:.3g}/{summary['share_over_1e-1']:.3g}; KL k1 {summary['kl_k1']:.3g}, "
          f"k3 {summary['kl_k3']:.3g}; ratio p01/p50/p99 {q['p01']:.4f}/{q['p50']:.4f}/{q['p99']:.4f}; "
          f"{n_nc} calls not comparable")
    for doc in flagged:
        for f in doc["findings"]:
            print(f"rollout {doc['rollout_id']}: {f['code']}: {f['message']}")
    if over:
        doc = over[0]
        print(f"error: rollout {doc['rollout_id']}: mean |Δ logprob| {doc['summary']['mean_abs_diff']:.3g} > "
              f"--max-mean-abs-diff {args.max_mean_abs_diff:g}"
              f"{' (' + doc['findings'][0]['code'] + ')' if doc['findings'] else ''}"
              f"{f'; {len(over) - 1} more rollouts over it' if len(over) > 1 else ''}", file=sys.stderr)
        return 1
    return 0
