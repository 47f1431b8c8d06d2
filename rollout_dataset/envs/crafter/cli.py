"""Command line of one Crafter capture: `python -m rollout_dataset.envs.crafter [flags]`.

It follows the command contract of `rollout_dataset.cli` (`add_arguments(parser)`, `run(args)`), so
it can also be registered as a `rollout-dataset` sub-command. Exit codes: 0 captured and valid;
1 the model server failed or the artifacts did not validate; 2 invalid arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rollout_dataset.cli.capture_cmd import parse_pair, report_result

__all__ = ["add_arguments", "run", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the flags.

    Args:
        parser: the (sub-)command's parser.
    """
    parser.add_argument("--seed", type=int, default=0, help="world seed (the task; default 0)")
    parser.add_argument("--rollout-seed", type=int, default=None, help="request seed (default: --seed)")
    parser.add_argument("--base-url", help="OpenAI-compatible server ending in /v1 (default: the local backend, crafter policy)")
    parser.add_argument("--model", help="model name (default: the local backend's)")
    parser.add_argument("--max-steps", type=int, default=100, help="Crafter steps per episode (default 100)")
    parser.add_argument("--max-turns", type=int, default=30, help="model calls per episode (default 30)")
    parser.add_argument("--max-actions", type=int, default=8, help="actions per act call (default 8)")
    parser.add_argument("--area", type=parse_pair, default=(64, 64), metavar="W,H", help="world size (default 64,64)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--max-tokens", type=int, default=512, help="completion cap per call (default 512)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="wall-time budget (default 900)")
    parser.add_argument("--tokenizer", help="tokenizer for samples.md and the re-render check (default builtin locally)")
    parser.add_argument("--out-dir", type=Path, default=Path("crafter_artifact"), help="artifact folder")


def run(args: argparse.Namespace) -> int:
    """Capture one Crafter rollout and print its summary.

    Args:
        args: the parsed flags. The API key comes from `OPENAI_API_KEY` (never a flag, never written).

    Returns:
        The exit code.
    """
    from rollout_dataset.envs.crafter.rollout import CrafterRolloutConfig, run_crafter_rollout
    from rollout_dataset.errors import UpstreamError

    try:
        config = CrafterRolloutConfig(
            out_dir=args.out_dir, seed=args.seed, rollout_seed=args.rollout_seed, base_url=args.base_url,
            model=args.model, api_key=os.environ.get("OPENAI_API_KEY"), max_steps=args.max_steps,
            max_turns=args.max_turns, max_actions=args.max_actions, temperature=args.temperature,
            max_tokens=args.max_tokens, timeout_s=args.timeout_s, area=args.area, tokenizer=args.tokenizer)
    except ValueError as exc:
        print(f"crafter: error: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_crafter_rollout(config)
    except UpstreamError as exc:
        print(f"crafter: stopped: {exc}", file=sys.stderr)
        return 1
    return report_result(result)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m rollout_dataset.envs.crafter`.

    Args:
        argv: the arguments (default `sys.argv[1:]`).

    Returns:
        The exit code.
    """
    import logging

    parser = argparse.ArgumentParser(prog="python -m rollout_dataset.envs.crafter",
                                     description="Capture one Crafter rollout through the recording proxy.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return run(args)
