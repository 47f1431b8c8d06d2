"""The `rollout-dataset` command: a thin layer over the library.

Each sub-command lives in its own module under `rollout_dataset.cli` and exposes two functions,
`add_arguments(parser)` and `run(args) -> int`. The dispatcher imports only the module of the
command being run, so `rollout-dataset serve` does not pay for `datasets`, and so on.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys

__all__ = ["main", "COMMANDS"]

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("rollout_dataset.cli.serve_cmd", "run the local vLLM-compatible backend"),
    "proxy": ("rollout_dataset.cli.proxy_cmd", "run the recording proxy in front of a model server"),
    "capture": ("rollout_dataset.cli.capture_cmd", "capture one rollout and write its artifacts"),
    "validate": ("rollout_dataset.cli.validate_cmd", "validate artifact files against their schemas"),
    "show": ("rollout_dataset.cli.show_cmd", "print one screen about a captured rollout"),
    "build": ("rollout_dataset.cli.build_cmd", "build a multi-config parquet dataset from artifacts"),
    "push": ("rollout_dataset.cli.push_cmd", "push a built dataset to the Hugging Face Hub (append-safe)"),
    "compact": ("rollout_dataset.cli.compact_cmd", "merge small parquet shards of a dataset folder or Hub repo"),
    "batch": ("rollout_dataset.cli.batch_cmd", "run seeds x rollouts with statistics, plots and a report"),
    "audit": ("rollout_dataset.cli.audit_cmd", "re-score captured logprobs with the server or a transformers model"),
}


# libraries that log every HTTP request or file lock at INFO/DEBUG
_CHATTY_LIBRARIES = ("httpx", "httpcore", "urllib3", "filelock", "huggingface_hub", "datasets", "fsspec",
                     "uvicorn", "uvicorn.access", "uvicorn.error", "asyncio", "matplotlib", "PIL")


def _available() -> dict[str, tuple[str, str]]:
    found = {}
    for name, (module, help_text) in COMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = (module, help_text)
    return found


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """Build the top-level parser; only the chosen sub-command's module is imported."""

    parser = argparse.ArgumentParser(
        prog="rollout-dataset",
        description="Capture LLM-agent rollouts token-exact and publish them as a Hugging Face dataset.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="-v: debug logging of this package; -vv: also other libraries' requests")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = None
    args = list(sys.argv[1:] if argv is None else argv)
    for token in args:
        if not token.startswith("-"):
            chosen = token
            break
    for name, (module, help_text) in _available().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            importlib.import_module(module).add_arguments(p)
            p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rollout-dataset` console script.

    Args:
        argv: the arguments after the program name (defaults to `sys.argv[1:]`).

    Returns:
        The process exit code.
    """
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if args.verbose < 2:  # other libraries' per-request chatter only with -vv
        for name in _CHATTY_LIBRARIES:
            logging.getLogger(name).setLevel(logging.WARNING)
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
