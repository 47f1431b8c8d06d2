"""`rollout-dataset capture`: capture one rollout through the recording proxy and write its artifacts.

Exit codes: 0 captured and valid; 1 the capture failed (first model call 4xx/5xx, server
unreachable, held-out leakage, artifacts that do not validate, failed push); 2 bad arguments
(task index out of range, unreadable task source, unknown harness).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

__all__ = ["add_arguments", "run", "config_from_args"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments (shared with capture_scripts/capture_trace.py).

    Args:
        parser: the parser to fill.
    """
    parser.add_argument("--base-url", default=None,
                        help="OpenAI-compatible server (ends in /v1); default: start the local backend")
    parser.add_argument("--model", default=None, help="model name (default: 'local', or the server's first model)")
    parser.add_argument("--task-index", type=int, default=0, help="which task of the selected list")
    parser.add_argument("--seed", type=int, default=0,
                        help="dataset seed: decides which task each index points at")
    parser.add_argument("--rollout-seed", type=int, default=None,
                        help="seed of this rollout, to sample the same task again (default: --seed)")
    parser.add_argument("--n-prompts", type=int, default=64, help="size of the selected task list")
    parser.add_argument("--tasks", default="builtin", help="builtin | FILE (.jsonl/.parquet) | hf:ORG/NAME[:SPLIT]")
    parser.add_argument("--harness", default="builtin",
                        help='builtin | cmd:"COMMAND" ({base_url} {model} {task_file} {workdir}) | '
                             "mini-swe-agent | opencode")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="wall-time budget of the harness")
    parser.add_argument("--out-dir", default="trace_artifact", help="artifact folder to write")
    parser.add_argument("--policy", default="oracle", help="local backend policy: oracle | script | echo")
    parser.add_argument("--script", default=None, help="script file of the local backend's script policy")
    parser.add_argument("--tokenizer", default=None, help="tokenizer for checks and samples (builtin | PATH | HUB_ID)")
    parser.add_argument("--max-turns", type=int, default=20, help="turn budget of the built-in harness")
    parser.add_argument("--keep-workdir", action="store_true", help="copy the agent's working directory to OUT/workdir")
    parser.add_argument("--no-push", action="store_true", help="do not push even when PUSH_TO_DATASET is set")


def config_from_args(args: argparse.Namespace):
    """Build a `CaptureConfig` from parsed arguments (the API key comes from `OPENAI_API_KEY`).

    Args:
        args: parsed arguments.

    Returns:
        The `CaptureConfig`.
    """
    from rollout_dataset.capture import CaptureConfig

    return CaptureConfig(out_dir=args.out_dir, base_url=args.base_url, model=args.model, task_index=args.task_index,
                         seed=args.seed, rollout_seed=args.rollout_seed, n_prompts=args.n_prompts, tasks=args.tasks,
                         harness=args.harness, timeout_s=args.timeout_s, policy=args.policy, script=args.script,
                         tokenizer=args.tokenizer, max_turns=args.max_turns, keep_workdir=args.keep_workdir,
                         push=False if args.no_push else None)


def run(args: argparse.Namespace) -> int:
    """Capture one rollout and print its summary.

    Args:
        args: parsed arguments.

    Returns:
        The exit code (see the module docstring).
    """
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.errors import TaskIndexError, TaskSourceError, UpstreamError
    from rollout_dataset.schema.check import format_failure

    if not getattr(args, "verbose", 0):
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per HTTP call is noise here
    try:
        config = config_from_args(args)
        result = capture_rollout(config)
    except (TaskIndexError, TaskSourceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except UpstreamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result.summary, indent=1))
    for failure in result.validation_failures:
        print(f"invalid: {format_failure(failure)}", file=sys.stderr)
    for error in result.errors:
        print(f"error: {error['kind']}: {error['message']}", file=sys.stderr)
    print(f"artifacts: {result.out_dir}", file=sys.stderr)
    return result.exit_code
