"""`rollout-dataset batch`: seeds x rollouts with stepwise vs final rewards, statistics, plots, a report.

Exit codes: 0 done; 1 a guardrail tripped (no agent turns, a model server 4xx/5xx, failed
rollouts) — outputs written so far are kept and the same `--out` resumes; 2 invalid arguments (or
a tool the run needs that is not installed, named with its install command before anything
starts). Errors are one ``error: ...`` line on stderr (`rollout_dataset.cli.reporting`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for annotations only; imported lazily where used
    from rollout_dataset.batch.config import BatchConfig

import argparse
import os
import sys
from pathlib import Path

__all__ = ["add_arguments", "run", "config_from_args"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's flags.

    Args:
        parser: the sub-command's parser.
    """
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--num-seeds", type=int, metavar="N", help="seeds 0..N-1")
    which.add_argument("--seeds", metavar="LIST", help="comma-separated seeds or ranges, e.g. 0,1,5 or 0-9")
    which.add_argument("--smoke", action="store_true", help="2 seeds x 1 rollout: a quick health check (must see agent turns)")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="batch folder (the same folder resumes)")
    parser.add_argument("--base-url", help="OpenAI-compatible inference URL ending in /v1 (default: start the local backend)")
    parser.add_argument("--model", help="model name (default: the server's)")
    parser.add_argument("--env", default="coding", help="environment: coding (default), crafter, or an installed plugin's "
                        "(entry-point group rollout_dataset.environments)")
    parser.add_argument("--env-option", action="append", default=[], metavar="KEY=VALUE",
                        help="environment setting, repeatable; VALUE is parsed as JSON when it can be "
                             "(coding: harness=NAME, e.g. harness=claude-code, and harbor_env=ENV as --harbor-env; crafter: max_steps=40, max_actions=8, "
                             "area=16 or area=[16,16], view=[9,7])")
    parser.add_argument("--rollouts-per-seed", type=int, default=3, metavar="K", help="rollouts per seed (default 3)")
    parser.add_argument("--max-turns", type=int, default=10, help="agent turn budget per rollout (default 10)")
    parser.add_argument("--concurrency", type=int, default=8, help="rollouts in flight (default 8)")
    parser.add_argument("--strategy", choices=["simple", "complex", "both"], default=None,
                        help="step-reward strategy to report (default: the --step-config's, else both)")
    parser.add_argument("--step-config", type=Path, metavar="FILE", help="step_rewards block from a .toml or .json file")
    parser.add_argument("--weights-json", type=Path, metavar="FILE", help="JSON {achievement: weight} for complex")
    parser.add_argument("--k-limits-json", type=Path, metavar="FILE", help="JSON {achievement: count limit} for complex")
    parser.add_argument("--indicator-lambda", type=float, default=None, help="reward per indicator for simple (default 1.0)")
    parser.add_argument("--executor", choices=["local", "ray"], default="local", help="local threads (default) or Ray tasks")
    parser.add_argument("--tasks", default="builtin", help="task source: builtin, a JSONL/parquet file, a local dataset "
                        "folder DIR[:SPLIT], hf:ORG/NAME[:SPLIT], harbor-builtin, or a folder of Harbor task folders")
    parser.add_argument("--n-prompts", type=int, default=64, help="size of the task list (default 64)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="wall-time budget per rollout (default 900)")
    parser.add_argument("--on-policy", action="store_true", help="on-policy mode: multi-turn chat prompts are built from the ids the model sampled (vLLM >= 0.32 or the local backend; see docs/proxy.md, On-policy mode)")
    parser.add_argument("--no-dataset", action="store_true", help="do not build dataset/ at the end")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    from rollout_dataset.cli.proxy_cmd import add_context_arguments, add_more_upstreams_argument, add_trust_env_argument

    add_context_arguments(parser, fit_default=True)
    add_trust_env_argument(parser)  # --no-trust-env
    add_more_upstreams_argument(parser)  # --upstream URL (repeatable)
    parser.add_argument("--unsafe-sandbox", action="store_true",
                        help="run the agents' code even where the allow-list sandbox (bubblewrap) cannot be built "
                             "(limits only; each summary.json records isolation: unsafe)")
    parser.add_argument("--push-every", type=int, default=0, metavar="N",
                        help="push finished rollouts to $PUSH_TO_DATASET every N rollouts, so a crash loses at "
                             "most N unpublished (default 0: push only at the end); append-safe, resumes duplicate-free")


def config_from_args(args: argparse.Namespace, argv: list[str] | None = None) -> BatchConfig:
    """Turn parsed flags into a `BatchConfig` (flags override the --step-config file).

    Raises:
        ConfigError: an invalid flag value or file.
    """
    from dataclasses import replace

    from rollout_dataset.batch.config import (
        MAX_ROLLOUTS,
        BatchConfig,
        load_json_mapping,
        load_step_config,
        parse_env_option,
        parse_seeds,
    )
    from rollout_dataset.errors import ConfigError
    from rollout_dataset.rewards.config import StepRewardConfig

    if args.smoke:
        seeds, per_seed = [0, 1], 1
    elif args.seeds is not None:
        seeds, per_seed = parse_seeds(args.seeds), args.rollouts_per_seed
    else:
        if not 1 <= args.num_seeds <= MAX_ROLLOUTS:
            raise ConfigError(f"--num-seeds: {args.num_seeds} is out of range (1 to {MAX_ROLLOUTS})")
        seeds, per_seed = list(range(args.num_seeds)), args.rollouts_per_seed
    step = load_step_config(args.step_config) if args.step_config else StepRewardConfig()
    if args.weights_json:
        step = replace(step, weights=load_json_mapping(args.weights_json, "weights"))
    if args.k_limits_json:
        step = replace(step, k_limits=load_json_mapping(args.k_limits_json, "k_limits"))
    if args.indicator_lambda is not None:
        step = replace(step, indicator_lambda=args.indicator_lambda)
    if args.strategy == "both" or (args.strategy is None and not args.step_config):
        strategies: tuple[str, ...] = ("simple", "complex")
    else:
        strategies = (args.strategy or step.strategy,)
    return BatchConfig(
        out_dir=args.out,
        seeds=seeds,
        rollouts_per_seed=per_seed,
        strategies=strategies,
        step_rewards=step,
        base_url=args.base_url,
        model=args.model,
        max_turns=args.max_turns,
        concurrency=args.concurrency,
        executor=args.executor,
        progress=not args.no_progress,
        build_dataset=not args.no_dataset,
        tasks=args.tasks,
        n_prompts=args.n_prompts,
        timeout_s=args.timeout_s,
        env=args.env,
        env_options=dict(parse_env_option(item) for item in getattr(args, "env_option", None) or []),
        argv=list(sys.argv[1:] if argv is None else argv),
        on_policy=args.on_policy,
        max_tokens_cap=args.max_tokens_cap,
        fit_context=args.fit_context,
        unsafe_sandbox=bool(getattr(args, "unsafe_sandbox", False)),
        push_repo=os.environ.get("PUSH_TO_DATASET", "").strip() or None,
        push_every=getattr(args, "push_every", 0) or 0,
        push_private=True if os.environ.get("PUSH_PRIVATE", "").strip().lower() in ("1", "true", "yes") else None,
        trust_env=getattr(args, "trust_env", True),
        more_upstreams=tuple(getattr(args, "more_upstreams", None) or ()),
    )


def run(args: argparse.Namespace) -> int:
    """Run the batch and print where its outputs are.

    Args:
        args: the parsed flags.

    Returns:
        0 when the batch finished; 1 when a guardrail tripped or the model server failed; 2 on
        invalid arguments.
    """
    from rollout_dataset.batch import run_batch
    from rollout_dataset.cli.reporting import EXIT_FAILED, EXIT_USAGE, report_error
    from rollout_dataset.errors import ConfigError, GuardrailError, RolloutDatasetError, UpstreamError

    try:
        config = config_from_args(args)
    except ConfigError as exc:
        return report_error(exc, EXIT_USAGE)
    if config.env == "coding":  # the coding agents' sandbox needs bubblewrap: named before anything starts
        from rollout_dataset.harness.requirements import require_harness_tools

        harness = str(config.env_options.get("harness", "builtin"))  # coding's one option (--env-option harness=NAME)
        require_harness_tools(harness, unsafe_sandbox=config.unsafe_sandbox)  # ToolNotInstalledError: exit 2
    try:
        result = run_batch(config)
    except ConfigError as exc:
        return report_error(exc, EXIT_USAGE)
    except UpstreamError as exc:
        return report_error(f"rollout-dataset batch: stopped: {exc}", EXIT_FAILED)
    except GuardrailError as exc:
        return report_error(f"rollout-dataset batch: {exc}", EXIT_FAILED,
                            note=f"outputs so far: {config.out_dir / 'report.md'}")
    except RolloutDatasetError as exc:
        return report_error(exc, EXIT_FAILED)
    out = result.out_dir
    print(f"rollouts: {result.planned} planned, {result.ran} run, {result.skipped} already finished (resumed)")
    for strategy, agg in result.summary.get("strategies", {}).items():
        def fmt(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.3f}"

        print(
            f"{strategy:8s} n={agg['n']:<4d} final mean={fmt(agg['final_return']['mean'])} "
            f"step mean={fmt(agg['step_reward_sum']['mean'])} "
            f"pearson={fmt(agg['pearson_step_vs_final'])} spearman={fmt(agg['spearman_step_vs_final'])}"
        )
    print(f"report:  {out / 'report.md'}")
    print(f"summary: {out / 'summary' / 'summary.json'}")
    print(f"runs:    {out / 'runs'}")
    if result.dataset_dir is not None:
        print(f"dataset: {result.dataset_dir}")
    if result.stream_pushes:
        print(f"streamed: {len(result.stream_pushes)} push(es) during the batch")
    if result.pushed is not None:
        print(f"pushed:  {result.pushed}")
    return 0
