"""The `rollout-dataset` command: a thin layer over the library.

Each sub-command lives in its own module under `rollout_dataset.cli` and exposes two functions,
`add_arguments(parser)` and `run(args) -> int`. The dispatcher imports only the module of the
command being run, so `rollout-dataset serve` does not pay for `datasets`, and so on.

Errors and exit codes (every command):

- A failure is one line on stderr, ``error: ...``, naming the file, field, URL, status, flag, valid
  range or install command; never a traceback for bad input. Results go to stdout (``validate``
  prints its per-file findings there, one ``file: json.path: reason`` line each, as a linter does).
- Exit codes: **0** done; **1** failed (a corrupt or invalid file, an unreachable or failing model
  server, a refused push, a guardrail); **2** usage (an unknown flag or value, a missing argument, a
  setting out of range, an unknown environment or harness, a harness or tool that is not installed);
  **130** interrupted.
- One layer does it (`rollout_dataset.cli.reporting`): commands report through `report_error`, and
  the dispatcher turns any deliberate error that reaches it (`rollout_dataset.errors`, and the
  built-ins those inherit: ValueError, OSError, RuntimeError, IndexError, ...) into that line and
  its code. argparse's own usage errors keep argparse's message and exit 2. ``-v`` also logs the
  traceback of a reported error.
- Third-party banners are silenced at this edge: transformers' "PyTorch was not found" notice
  (`TRANSFORMERS_NO_ADVISORY_WARNINGS`, set unless the caller set it); its real warnings still show.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys

__all__ = ["main", "COMMANDS", "quiet_third_party_banners"]

# command name -> its one-line help; each command is the module `rollout_dataset.cli.<name>_cmd`
_HELP: dict[str, str] = {
    "serve": "run the local vLLM-compatible backend",
    "proxy": "run the recording proxy in front of a model server",
    "capture": "capture one rollout and write its artifacts",
    "validate": "validate artifact files against their schemas",
    "show": "print one screen about a captured rollout",
    "build": "build a multi-config parquet dataset from artifacts",
    "export": "write rollouts as ATIF trajectories (Harbor's interchange format)",
    "sessions": "write a proxy's sealed sessions (session API) as artifact folders for build",
    "push": "push a built dataset to the Hugging Face Hub (append-safe)",
    "compact": "merge small parquet shards of a dataset folder or Hub repo",
    "batch": "run seeds x rollouts with statistics, plots and a report",
    "view": "browse artifact folders or a built dataset in a local read-only web viewer",
    "audit": "re-score captured logprobs with the server or a transformers model",
}
#: command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {name: (f"rollout_dataset.cli.{name}_cmd", text) for name, text in _HELP.items()}


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


def quiet_third_party_banners() -> None:
    """Silence libraries' start-up notices (not their warnings) for this process and its children.

    transformers logs "PyTorch was not found..." as an *advisory* warning on import; its
    ``TRANSFORMERS_NO_ADVISORY_WARNINGS`` switch drops advisories only. A value the caller set is kept.
    """
    import os

    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rollout-dataset` console script.

    Args:
        argv: the arguments after the program name (defaults to `sys.argv[1:]`).

    Returns:
        The process exit code.
    """
    quiet_third_party_banners()
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if args.verbose < 2:  # other libraries' per-request chatter only with -vv
        for name in _CHATTY_LIBRARIES:
            logging.getLogger(name).setLevel(logging.WARNING)
    from rollout_dataset.cli.reporting import EXIT_FAILED, EXIT_INTERRUPTED, REPORTED_ERRORS, network_error, report_error

    try:
        module = importlib.import_module(args._module)
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except REPORTED_ERRORS as exc:  # a deliberate error (rollout_dataset.errors) or the built-in it inherits
        return report_error(exc)
    except Exception as exc:  # an HTTP client's "could not reach" (a Hub endpoint, a model server): named, exit 1
        if not network_error(exc):
            raise  # a bug: its traceback is the report
        return report_error(exc, EXIT_FAILED)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
