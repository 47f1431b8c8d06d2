"""The built-in coding agent as a command, pointed at any OpenAI base URL (the online recipe's default
harness: the same agent `capture --harness builtin` runs, unmodified, as a process of its own).

    python -m rollout_dataset.online.builtin_agent --base-url URL --model NAME --prompt-file FILE [--workdir DIR]

It works in `--workdir` (a fresh temporary folder by default) with the built-in tools; its commands run
as plain subprocesses there (no sandbox: run the whole command inside one when the model is untrusted).
It prints one JSON line: stop reason, model calls, tool calls by name. Exit 0 when it ran, 1 when its
first model call failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the agent once.

    Args:
        argv: the arguments (default: the process's).

    Returns:
        0 when the agent ran to a stop, 1 when its first model call failed.
    """
    from rollout_dataset.errors import UpstreamError
    from rollout_dataset.harness import BuiltinAgent, ToolBox

    parser = argparse.ArgumentParser(prog="python -m rollout_dataset.online.builtin_agent", description=__doc__)
    parser.add_argument("--base-url", required=True, help="OpenAI base URL (a proxy session's, ending in /v1)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt-file", required=True, help="file holding the task statement")
    parser.add_argument("--workdir", default=None, help="working directory (default: a new temporary one)")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=512)
    args = parser.parse_args(argv)
    instruction = Path(args.prompt_file).read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="online-agent-") as scratch:
        workdir = Path(args.workdir or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        agent = BuiltinAgent(args.base_url, args.model, ToolBox(workdir), max_turns=args.max_turns,
                             max_tokens=args.max_tokens, api_key="unused")
        try:
            result = agent.run(instruction)
        except UpstreamError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(json.dumps({"stop_reason": result.stop_reason, "model_calls": result.model_calls,
                      "tool_calls_by_name": result.tool_calls_by_name}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
