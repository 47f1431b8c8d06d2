"""`rollout-dataset capture`: capture one rollout through the recording proxy and write its artifacts.

Every environment goes through the one capture pipeline (`rollout_dataset.capture.capture_rollout`).
`--env coding` (the default) captures one coding task with a harness; `--env crafter` (or any
environment of the registry, plugins included) gets the shared flags (`--seed`, `--rollout-seed`,
`--base-url`, `--model`, `--max-turns`, `--max-tokens`, `--temperature`, `--timeout-s`,
`--tokenizer`, `--out-dir`). Each environment declares its own flags (`Environment.capture_flags`,
`rollout_dataset.envs.CaptureFlag`: coding's `--harness`, `--task-index`, ...; Crafter's
`--max-steps`, `--max-actions`, `--area`; a plugin's the same way); they are listed in a group per
environment and refused, by name, with another `--env`.

Exit codes: 0 captured and valid; 1 the capture failed (first model call 4xx/5xx, server
unreachable, held-out leakage, artifacts that do not validate, failed push); 2 bad arguments
(task index out of range, unreadable task source, unknown harness, a harness or sandbox tool that is
not installed: checked before anything starts, `rollout_dataset.harness.requirements`, the message
names the install command such as ``make npm-tools``). Errors are one ``error: ...`` line on
stderr (`rollout_dataset.cli.reporting`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for annotations only; imported lazily where used
    from rollout_dataset.capture.result import CaptureResult
    from rollout_dataset.recipes.coding.config import CaptureConfig

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
    parser.add_argument("--seed", type=int, default=0,
                        help="dataset seed: decides which task each index points at (crafter: the world)")
    parser.add_argument("--rollout-seed", type=int, default=None,
                        help="seed of this rollout, to sample the same task again (default: --seed)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="wall-time budget of the harness")
    parser.add_argument("--out-dir", default=None,
                        help="artifact folder to write (default trace_artifact; crafter: crafter_artifact)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer for checks and samples (builtin | PATH | HUB_ID)")
    parser.add_argument("--max-turns", type=int, default=None,
                        help="turn budget of the built-in harness (default 20; crafter: model calls, default 30)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="completion cap per model call of the built-in harness or game agent "
                             "(default 2048; crafter 512)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature of the built-in harness or game agent (default 1.0)")
    from rollout_dataset.cli.proxy_cmd import add_context_arguments, add_more_upstreams_argument, add_trust_env_argument

    add_context_arguments(parser, fit_default=True)
    add_trust_env_argument(parser)  # --no-trust-env
    add_more_upstreams_argument(parser)  # --upstream URL (repeatable)
    parser.add_argument("--on-policy", action="store_true", help="on-policy mode: multi-turn chat prompts are built from the ids the model sampled (vLLM >= 0.32 or the local backend; see docs/proxy.md, On-policy mode)")
    parser.add_argument("--record-upstream-host", action="store_true",
                        help="record --base-url in task.json (default: not recorded, so internal host names stay private)")
    parser.add_argument("--no-push", action="store_true", help="do not push even when PUSH_TO_DATASET is set")
    add_environment_arguments(parser)


def add_environment_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every environment's own flags (`Environment.capture_flags`), one group per environment.

    Built-ins and installed plugins alike; a plugin that cannot be loaded is skipped with a warning
    (``capture --env NAME`` then names its error).

    Args:
        parser: the `capture` parser.
    """
    from rollout_dataset.envs import available_environments, get_environment
    from rollout_dataset.errors import ConfigError

    taken = {option for action in parser._actions for option in action.option_strings}
    for name in available_environments():
        try:
            flags = tuple(getattr(get_environment(name), "capture_flags", ()))
        except ConfigError as exc:
            logging.getLogger(__name__).warning("environment %s: its flags are not available: %s", name, exc)
            continue
        group = parser.add_argument_group(f"--env {name} options")
        for flag in flags:
            if flag.flag not in taken:  # two environments may share a flag; argparse takes it once
                group.add_argument(flag.flag, **flag.argparse_options())
                taken.add(flag.flag)


def refuse_foreign_flags(args: argparse.Namespace, chosen: str) -> None:
    """Refuse the flags of another environment than the chosen one, naming them.

    Args:
        args: parsed arguments.
        chosen: the ``--env`` name.

    Raises:
        ConfigError: a flag that belongs to another environment was given.
    """
    from rollout_dataset.envs import available_environments, get_environment
    from rollout_dataset.errors import ConfigError

    own = {flag.dest for flag in getattr(get_environment(chosen), "capture_flags", ())}
    for name in available_environments():
        if name == chosen:
            continue
        try:
            owner = get_environment(name)
        except ConfigError:
            continue
        wrong = [f.flag for f in getattr(owner, "capture_flags", ())
                 if f.dest not in own and getattr(args, f.dest, f.default) not in (f.default, [])]
        if not wrong:
            continue
        flags = ", ".join(wrong)
        scope = getattr(owner, "flag_scope", None)
        if scope:
            raise ConfigError(f"{flags}: only for {scope} (--env {name}), not --env {chosen}")
        raise ConfigError(f"{flags} only appl{'ies' if len(wrong) == 1 else 'y'} to --env {name}")


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
    refuse_foreign_flags(args, args.env)
    if not callable(getattr(environment, "config_class", None)):
        raise ConfigError(f"--env {args.env}: this environment only runs in a batch (it has no config_class())")
    config_class = environment.config_class()
    fields = {f.name for f in dataclasses.fields(config_class)}
    given = {"out_dir": args.out_dir, "seed": args.seed, "rollout_seed": args.rollout_seed, "base_url": args.base_url,
             "model": args.model, "max_turns": args.max_turns, "timeout_s": args.timeout_s,
             "max_tokens": getattr(args, "max_tokens", None), "temperature": getattr(args, "temperature", None),
             "tokenizer": args.tokenizer, "api_key": os.environ.get("OPENAI_API_KEY"),
             "trust_env": None if getattr(args, "trust_env", True) else False,  # passed only when --no-trust-env
             "more_upstreams": tuple(args.more_upstreams) if getattr(args, "more_upstreams", None) else None,
             **_push_destination(args),
             "max_tokens_cap": getattr(args, "max_tokens_cap", None),
             **{flag.dest: getattr(args, flag.dest, None) for flag in getattr(environment, "capture_flags", ())}}
    unknown = sorted(k for k, v in given.items() if v is not None and k not in fields and k != "api_key")
    if unknown:
        raise ConfigError(f"--env {args.env}: {', '.join('--' + k.replace('_', '-') for k in unknown)} not supported")
    return config_class(**{k: v for k, v in given.items() if v is not None and k in fields})


def report_result(result: CaptureResult) -> int:
    """Print a capture's summary (stdout) and its failures (stderr); return its exit code.

    Args:
        result: a `CaptureResult` (of any environment).

    Returns:
        The capture's exit code.
    """
    from rollout_dataset.schema.check import format_failure

    print(json.dumps(result.summary, indent=1))
    if result.validation_failures:  # the folder stays on disk: nothing of the rollout is lost
        first, more = result.validation_failures[0], len(result.validation_failures) - 1
        tail = f" (and {more} more: rollout-dataset validate {result.out_dir})" if more else ""
        print(f"error: {result.out_dir}: refused by the schema check, kept on disk: {format_failure(first)}{tail}",
              file=sys.stderr)
    for error in result.errors:
        print(f"error: {error['kind']}: {error['message']}", file=sys.stderr)
    print(f"artifacts: {result.out_dir}", file=sys.stderr)
    return result.exit_code


def config_from_args(args: argparse.Namespace) -> CaptureConfig:
    """Build a `CaptureConfig` from parsed arguments (the API key comes from `OPENAI_API_KEY`).

    Args:
        args: parsed arguments.

    Returns:
        The `CaptureConfig`.

    Raises:
        ConfigError: a game-only flag (`--max-steps`, `--max-actions`, `--area`) was given.
        ValueError: a value out of range (the configuration's own check).
    """
    from rollout_dataset.recipes.coding import CaptureConfig

    refuse_foreign_flags(args, "coding")
    return CaptureConfig(out_dir=args.out_dir or "trace_artifact", base_url=args.base_url, model=args.model,
                         task_index=args.task_index, seed=args.seed, rollout_seed=args.rollout_seed, n_prompts=args.n_prompts, tasks=args.tasks,
                         harness=args.harness, harbor_env=args.harbor_env, timeout_s=args.timeout_s, policy=args.policy,
                         script=args.script,
                         tokenizer=args.tokenizer, max_turns=20 if args.max_turns is None else args.max_turns,
                         **{k: v for k in ("max_tokens", "temperature") if (v := getattr(args, k, None)) is not None},
                         keep_workdir=args.keep_workdir,
                         **_push_destination(args), on_policy=args.on_policy,
                         max_tokens_cap=args.max_tokens_cap, fit_context=args.fit_context,
                         unsafe_sandbox=args.unsafe_sandbox, sandbox_ro_paths=tuple(args.sandbox_ro),
                         record_upstream_host=getattr(args, "record_upstream_host", False),
                         trust_env=getattr(args, "trust_env", True),
                         more_upstreams=tuple(getattr(args, "more_upstreams", None) or ()))


def run(args: argparse.Namespace) -> int:
    """Capture one rollout and print its summary.

    Args:
        args: parsed arguments.

    Returns:
        The exit code (see the module docstring).
    """
    from rollout_dataset.capture import capture_rollout
    from rollout_dataset.cli.reporting import EXIT_FAILED, EXIT_USAGE, report_error
    from rollout_dataset.errors import SandboxUnavailableError, TaskIndexError, TaskSourceError, UpstreamError

    if not getattr(args, "verbose", 0):
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per HTTP call is noise here
    if getattr(args, "env", "coding") == "coding":  # a harness that is not installed stops it before anything starts
        from rollout_dataset.harness.requirements import require_harness_tools

        require_harness_tools(args.harness, unsafe_sandbox=args.unsafe_sandbox)  # ToolNotInstalledError: exit 2
    try:
        if getattr(args, "env", "coding") == "coding":
            config = config_from_args(args)
        else:
            config = env_config_from_args(args)
        result = capture_rollout(config)
    except (TaskIndexError, TaskSourceError, ValueError) as exc:  # ConfigError is a ValueError
        return report_error(exc, EXIT_USAGE)
    except (UpstreamError, SandboxUnavailableError) as exc:
        return report_error(exc, EXIT_FAILED)
    return report_result(result)
