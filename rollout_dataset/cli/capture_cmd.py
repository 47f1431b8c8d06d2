"""`rollout-dataset capture`: capture one rollout through the recording proxy and write its artifacts.

Every environment goes through the one capture pipeline (`rollout_dataset.capture.capture_rollout`).
`--env coding` (the default) captures one coding task with a harness; `--env crafter` (or any
environment of the registry, plugins included) gets the shared flags (`--seed`, `--rollout-seed`,
`--base-url`, `--model`, `--max-turns`, `--max-tokens`, `--temperature`, `--timeout-s`,
`--tokenizer`, `--out-dir`) and the game's own (`--max-steps`, `--max-actions`, `--area`) that its
configuration class has.

Exit codes: 0 captured and valid; 1 the capture failed (first model call 4xx/5xx, server
unreachable, held-out leakage, artifacts that do not validate, failed push); 2 bad arguments
(task index out of range, unreadable task source, unknown harness).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

__all__ = ["add_arguments", "run", "config_from_args", "env_config_from_args"]



def _push_destination(args: argparse.Namespace) -> dict[str, Any]:
    """``push_repo``/``push_private`` for the capture config: from ``PUSH_TO_DATASET``/``PUSH_PRIVATE``
    unless ``--no-push`` (the library itself never reads the environment)."""
    from rollout_dataset.cli.push_env import push_destination_from_env

    repo_id, private = (None, None) if args.no_push else push_destination_from_env()
    return {"push_repo": repo_id, "push_private": private}

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments (shared with capture_scripts/capture_trace.py).

    Args:
        parser: the parser to fill.
    """
    parser.add_argument("--env", default="coding",
                        help="environment: coding (default: a coding task and a harness), crafter, or an installed "
                             "plugin's (entry-point group rollout_dataset.environments)")
    parser.add_argument("--base-url", default=None,
                        help="OpenAI-compatible server (ends in /v1); default: start the local backend")
    parser.add_argument("--model", default=None, help="model name (default: 'local', or the server's first model)")
    parser.add_argument("--task-index", type=int, default=0, help="which task of the selected list")
    parser.add_argument("--seed", type=int, default=0,
                        help="dataset seed: decides which task each index points at (crafter: the world)")
    parser.add_argument("--rollout-seed", type=int, default=None,
                        help="seed of this rollout, to sample the same task again (default: --seed)")
    parser.add_argument("--n-prompts", type=int, default=64, help="size of the selected task list")
    parser.add_argument("--tasks", default="builtin", help="builtin | FILE (.jsonl/.parquet) | hf:ORG/NAME[:SPLIT]")
    parser.add_argument("--harness", default="builtin",
                        help='builtin | cmd:"COMMAND" ({base_url} {model} {task_file} {workdir}) | '
                             "mini-swe-agent | opencode | codex | claude-code")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="wall-time budget of the harness")
    parser.add_argument("--out-dir", default=None,
                        help="artifact folder to write (default trace_artifact; crafter: crafter_artifact)")
    parser.add_argument("--policy", default="oracle", help="local backend policy: oracle | script | echo")
    parser.add_argument("--script", default=None, help="script file of the local backend's script policy")
    parser.add_argument("--tokenizer", default=None, help="tokenizer for checks and samples (builtin | PATH | HUB_ID)")
    parser.add_argument("--max-turns", type=int, default=None,
                        help="turn budget of the built-in harness (default 20; crafter: model calls, default 30)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="completion cap per model call of the built-in harness or game agent "
                             "(default 2048; crafter 512)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature of the built-in harness or game agent (default 1.0)")
    game = parser.add_argument_group("environment options (--env crafter)")
    game.add_argument("--max-steps", type=int, default=None, help="game steps per episode (crafter default 100)")
    game.add_argument("--max-actions", type=int, default=None, help="actions per act call (crafter default 8)")
    game.add_argument("--area", type=parse_pair, default=None, metavar="W,H", help="world size (crafter default 64,64)")
    from rollout_dataset.cli.proxy_cmd import add_context_arguments

    add_context_arguments(parser, fit_default=True)
    parser.add_argument("--keep-workdir", action="store_true", help="copy the agent's working directory to OUT/workdir")
    parser.add_argument("--on-policy", action="store_true", help="on-policy mode: multi-turn chat prompts are built from the ids the model sampled (vLLM >= 0.32 or the local backend; see README 'On-policy mode')")
    parser.add_argument("--sandbox-ro", action="append", default=[], metavar="PATH",
                        help="a file or folder an external harness needs read-only in its sandbox (repeatable); "
                             "the program its command runs (by absolute path) is exposed anyway")
    parser.add_argument("--unsafe-sandbox", action="store_true",
                        help="run the agent's code even where the allow-list sandbox (bubblewrap) cannot be built: "
                             "limits only, no isolation (summary.json records isolation: unsafe)")
    parser.add_argument("--record-upstream-host", action="store_true",
                        help="record --base-url in task.json (default: not recorded, so internal host names stay private)")
    parser.add_argument("--no-push", action="store_true", help="do not push even when PUSH_TO_DATASET is set")


def parse_pair(text: str) -> tuple[int, int]:
    """Parse `W,H` (or `WxH`, or one number for a square)."""
    parts = [p for p in text.lower().replace("x", ",").split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not W,H (e.g. 64,64)") from None
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not W,H (e.g. 64,64)")
    return values[0], values[1]


#: flags that only mean something for the coding environment, with their defaults
_CODING_ONLY = {"task_index": 0, "n_prompts": 64, "tasks": "builtin", "harness": "builtin", "policy": "oracle",
                "script": None, "keep_workdir": False, "max_tokens_cap": None, "unsafe_sandbox": False,
                "sandbox_ro": []}
#: flags that only mean something for a game environment
_GAME_ONLY = ("max_steps", "max_actions", "area")


def env_config_from_args(args: argparse.Namespace) -> Any:
    """Build the rollout configuration of a registered environment other than coding (`--env crafter`).

    Only the flags the environment's configuration has are passed, and only when given, so its
    own defaults apply otherwise. The API key comes from `OPENAI_API_KEY`.

    Args:
        args: parsed arguments.

    Returns:
        An instance of the environment's configuration class (e.g. `CrafterRolloutConfig`).

    Raises:
        ConfigError: an unknown environment, or a coding-only flag given for it.
        ValueError: a value out of range (the configuration's own check).
    """
    import dataclasses
    import os

    from rollout_dataset.envs import get_environment
    from rollout_dataset.errors import ConfigError

    environment = get_environment(args.env)
    wrong = [name for name, default in _CODING_ONLY.items() if getattr(args, name, default) != default]
    if wrong:
        flags = ", ".join("--" + n.replace("_", "-") for n in wrong)
        raise ConfigError(f"--env {args.env}: {flags} only appl{'ies' if len(wrong) == 1 else 'y'} to --env coding")
    if not callable(getattr(environment, "config_class", None)):
        raise ConfigError(f"--env {args.env}: this environment only runs in a batch (it has no config_class())")
    config_class = environment.config_class()
    fields = {f.name for f in dataclasses.fields(config_class)}
    given = {"out_dir": args.out_dir, "seed": args.seed, "rollout_seed": args.rollout_seed, "base_url": args.base_url,
             "model": args.model, "max_turns": args.max_turns, "timeout_s": args.timeout_s,
             "max_tokens": getattr(args, "max_tokens", None), "temperature": getattr(args, "temperature", None),
             "tokenizer": args.tokenizer, "api_key": os.environ.get("OPENAI_API_KEY"),
             **_push_destination(args),
             **{name: getattr(args, name, None) for name in _GAME_ONLY}}
    unknown = sorted(k for k, v in given.items() if v is not None and k not in fields and k != "api_key")
    if unknown:
        raise ConfigError(f"--env {args.env}: {', '.join('--' + k.replace('_', '-') for k in unknown)} not supported")
    return config_class(**{k: v for k, v in given.items() if v is not None and k in fields})


def report_result(result) -> int:
    """Print a capture's summary (stdout) and its failures (stderr); return its exit code.

    Args:
        result: a `CaptureResult` (of any environment).

    Returns:
        The capture's exit code.
    """
    from rollout_dataset.schema.check import format_failure

    print(json.dumps(result.summary, indent=1))
    for failure in result.validation_failures:
        print(f"invalid: {format_failure(failure)}", file=sys.stderr)
    for error in result.errors:
        print(f"error: {error['kind']}: {error['message']}", file=sys.stderr)
    print(f"artifacts: {result.out_dir}", file=sys.stderr)
    return result.exit_code


def config_from_args(args: argparse.Namespace):
    """Build a `CaptureConfig` from parsed arguments (the API key comes from `OPENAI_API_KEY`).

    Args:
        args: parsed arguments.

    Returns:
        The `CaptureConfig`.

    Raises:
        ConfigError: a game-only flag (`--max-steps`, `--max-actions`, `--area`) was given.
        ValueError: a value out of range (the configuration's own check).
    """
    from rollout_dataset.capture import CaptureConfig
    from rollout_dataset.errors import ConfigError

    given = [name for name in _GAME_ONLY if getattr(args, name, None) is not None]
    if given:
        raise ConfigError(f"{', '.join('--' + n.replace('_', '-') for n in given)}: only for a game environment "
                          "(--env crafter), not --env coding")
    return CaptureConfig(out_dir=args.out_dir or "trace_artifact", base_url=args.base_url, model=args.model,
                         task_index=args.task_index, seed=args.seed, rollout_seed=args.rollout_seed, n_prompts=args.n_prompts, tasks=args.tasks,
                         harness=args.harness, timeout_s=args.timeout_s, policy=args.policy, script=args.script,
                         tokenizer=args.tokenizer, max_turns=20 if args.max_turns is None else args.max_turns,
                         **{k: v for k in ("max_tokens", "temperature") if (v := getattr(args, k, None)) is not None},
                         keep_workdir=args.keep_workdir,
                         **_push_destination(args), on_policy=args.on_policy,
                         max_tokens_cap=args.max_tokens_cap, fit_context=args.fit_context,
                         unsafe_sandbox=args.unsafe_sandbox, sandbox_ro_paths=tuple(args.sandbox_ro),
                         record_upstream_host=getattr(args, "record_upstream_host", False))


def run(args: argparse.Namespace) -> int:
    """Capture one rollout and print its summary.

    Args:
        args: parsed arguments.

    Returns:
        The exit code (see the module docstring).
    """
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.errors import SandboxUnavailableError, TaskIndexError, TaskSourceError, UpstreamError

    if not getattr(args, "verbose", 0):
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per HTTP call is noise here
    try:
        if getattr(args, "env", "coding") == "coding":
            config = config_from_args(args)
        else:
            config = env_config_from_args(args)
        result = capture_rollout(config)
    except (TaskIndexError, TaskSourceError, ValueError) as exc:  # ConfigError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (UpstreamError, SandboxUnavailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return report_result(result)
