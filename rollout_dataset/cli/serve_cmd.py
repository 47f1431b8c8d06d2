"""`rollout-dataset serve`: run the local vLLM-compatible backend until interrupted.

    rollout-dataset serve [--host 127.0.0.1] [--port 8000] [--tokenizer builtin|harmony|PATH|HUB_ID]
                          [--policy echo|script|oracle] [--script FILE] [--served-model-name local]
                          [--reasoning-parser qwen3|deepseek_r1|openai_gptoss]
                          [--tool-call-parser hermes|deepseek_v3]

`--tokenizer harmony` serves gpt-oss's Harmony format as vLLM 0.32 serves a `gpt_oss` model (prompts
rendered by openai-harmony); `--reasoning-parser openai_gptoss` then surfaces the analysis channel as
`reasoning`, as vLLM's parser of that name. `--tool-call-parser deepseek_v3` writes and reads tool calls
in DeepSeek-V3/R1's markup (`<｜tool▁calls▁begin｜>`...), as vLLM's parser of that name.

Prints the base URL (ending in /v1) once the server listens.
"""

from __future__ import annotations

import argparse
import asyncio

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of `serve`.

    Args:
        parser: the sub-command parser.
    """
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--tokenizer", default="builtin",
                        help="builtin, harmony (gpt-oss o200k_harmony: chat prompts rendered by openai-harmony, "
                             "as vLLM 0.32 serves a gpt_oss model), a tokenizer folder, or a Hub id")
    parser.add_argument("--policy", default="echo", help="what the model says: echo, script, oracle, ...")
    parser.add_argument("--script", default=None, help="JSON/YAML script of steps (with --policy script)")
    parser.add_argument("--served-model-name", default="local", help="model name clients use (default local)")
    parser.add_argument("--max-model-len", type=int, default=131072, help="context length in tokens (default 131072)")
    parser.add_argument("--return-tokens-as-token-ids", action="store_true",
                        help="report logprob tokens as token_id:N (as vLLM's flag of the same name)")
    parser.add_argument("--reasoning-parser", default=None, metavar="NAME",
                        help="qwen3 or deepseek_r1: split <think> reasoning into the message's `reasoning` as "
                             "vLLM 0.32's parser of that name does (the tokenizer needs <think>/</think> tokens); "
                             "openai_gptoss (with --tokenizer harmony): the analysis channel as `reasoning`")
    parser.add_argument("--tool-call-parser", default="hermes", metavar="NAME",
                        help="hermes (default: <tool_call> JSON blocks) or deepseek_v3 (DeepSeek-V3/R1's "
                             "<｜tool▁calls▁begin｜> markup; the tokenizer needs those tokens): how tool calls are "
                             "written and parsed, as vLLM 0.32's parser of that name")


async def _serve(args: argparse.Namespace) -> None:
    from rollout_dataset.backend import LocalBackend
    from rollout_dataset.envs.registry import register_builtin_policies

    register_builtin_policies()

    backend = LocalBackend(
        tokenizer=args.tokenizer,
        policy=args.policy,
        served_model_name=args.served_model_name,
        host=args.host,
        port=args.port,
        script=args.script,
        max_model_len=args.max_model_len,
        return_tokens_as_token_ids=args.return_tokens_as_token_ids,
        reasoning_parser=args.reasoning_parser,
        tool_call_parser=args.tool_call_parser,
    )
    async with backend:
        print(backend.base_url, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - non-main thread / Windows
                pass
        await stop.wait()


def run(args: argparse.Namespace) -> int:
    """Run the backend until SIGINT/SIGTERM.

    Args:
        args: parsed options.

    Returns:
        0 after a clean stop, 2 on bad options (unknown policy, missing script or tokenizer).
    """
    from rollout_dataset.cli.reporting import EXIT_USAGE, bind_failure, report_error

    from rollout_dataset.backend.harmony_reply import HARMONY_REASONING_PARSER
    from rollout_dataset.backend.reasoning_parser import REASONING_PARSERS
    from rollout_dataset.backend.tool_parsers import TOOL_CALL_PARSERS

    parsers = (*REASONING_PARSERS, HARMONY_REASONING_PARSER)
    if args.policy == "script" and not args.script:
        return report_error("--policy script needs --script FILE", EXIT_USAGE)
    if args.reasoning_parser is not None and args.reasoning_parser not in parsers:
        return report_error(f"--reasoning-parser {args.reasoning_parser!r}: choose from {', '.join(parsers)}",
                            EXIT_USAGE)
    if args.tool_call_parser not in TOOL_CALL_PARSERS:
        return report_error(f"--tool-call-parser {args.tool_call_parser!r}: choose from {', '.join(TOOL_CALL_PARSERS)}",
                            EXIT_USAGE)
    try:
        asyncio.run(_serve(args))
    except ImportError as exc:  # --tokenizer harmony without openai-harmony / quicktok-v1: names the install
        return report_error(exc, EXIT_USAGE)
    except (ValueError, FileNotFoundError, OSError) as exc:
        failed = bind_failure(exc, args.host, args.port)
        return failed if failed is not None else report_error(exc, EXIT_USAGE)
    return 0
