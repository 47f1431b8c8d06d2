"""How every command reports a failure: one ``error: ...`` line on stderr and an exit code.

The contract (also in the `rollout_dataset.cli` docstring):

| exit code | meaning |
| --- | --- |
| 0 | done |
| 1 | failed: the input was read but the work could not be done (a corrupt file, an unreachable
      server, a refused push, a guardrail, an address already in use: the environment, which the
      user fixes by choosing another port, not a wrong command line; see `bind_failure`) |
| 2 | usage: the command line is wrong (an unknown flag or value, a missing argument, a setting
      out of range, a tool that is not installed) |
| 130 | interrupted (Ctrl-C) |

A command either returns its code after calling `report_error`, or lets an error propagate: the
dispatcher (`rollout_dataset.cli.main`) turns the project's deliberate errors
(`rollout_dataset.errors`) and the built-ins they inherit into the same one line. Anything else is
a bug and keeps its traceback. With ``-v`` the traceback of a reported error is logged too.
"""

from __future__ import annotations

import errno

import builtins
import logging
import sys
from typing import TextIO

from rollout_dataset import errors as _errors

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED", "USAGE_ERRORS", "REPORTED_ERRORS",
           "error_line", "exit_code_for", "network_error", "report_error"]

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: errors that mean "the command line (or a file it names as a setting) is wrong": exit 2
USAGE_ERRORS: tuple[type[BaseException], ...] = (_errors.ConfigError, _errors.TaskIndexError,
                                                 _errors.TaskSourceError, _errors.ToolNotInstalledError)


def _reported_errors() -> tuple[type[BaseException], ...]:
    """The project's error base class and every built-in one of its classes inherits (one definition:
    `rollout_dataset.errors`)."""
    found: list[type[BaseException]] = [_errors.RolloutDatasetError]
    for name in _errors.__all__:
        error_class: type = getattr(_errors, name)
        for base in error_class.__mro__:
            if getattr(builtins, base.__name__, None) is base and base not in (BaseException, Exception, object) \
                    and base not in found:
                found.append(base)
    return tuple(found)


#: what the dispatcher reports as one line (everything else is a bug: its traceback is kept)
REPORTED_ERRORS = _reported_errors()


def network_error(error: BaseException) -> bool:
    """Whether `error` is an HTTP client's transport failure (httpx, or the httpx fork huggingface_hub
    ships as ``httpx2``): a server that cannot be reached, a timeout, a dropped connection.

    Only clients already imported are consulted (nothing is imported to check).

    Args:
        error: the exception.

    Returns:
        True for a transport error of one of those clients.
    """
    for name in ("httpx", "httpx2"):
        client = sys.modules.get(name)
        base = getattr(client, "TransportError", None)
        if isinstance(base, type) and isinstance(error, base):
            return True
    return False


def error_line(error: BaseException | str) -> str:
    """The one line that names a failure (without the ``error: `` prefix).

    Args:
        error: an exception or a message.

    Returns:
        One line: a `SchemaValidationError` gives its first failure and how many more; an `OSError`
        with a file name gives ``FILE: reason``; line breaks become spaces.
    """
    if isinstance(error, _errors.SchemaValidationError) and error.failures:
        file, path, reason = error.failures[0]
        text = f"{file}: {path}: {reason}"
        if len(error.failures) > 1:
            text += f" (and {len(error.failures) - 1} more failure(s): rollout-dataset validate {file})"
    elif isinstance(error, OSError) and not isinstance(error, _errors.RolloutDatasetError) \
            and error.filename is not None and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    elif isinstance(error, BaseException) and network_error(error):
        try:
            url = str(error.request.url)  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):  # no request attached
            url = "the server"
        from rollout_dataset.proxy.redact import redact_url, redact_urls_in_text

        text = f"could not reach {redact_url(url) or url}: {redact_urls_in_text(str(error)) or type(error).__name__}"
    elif isinstance(error, BaseException):
        text = str(error) or type(error).__name__
    else:
        text = error
    return " ".join(text.split())


#: errno values of an address that cannot be bound: in use, not on this machine, a privileged port.
_BIND_ERRNOS = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)


def bind_failure(error: BaseException, host: str, port: int) -> int | None:
    """Report a server's address that cannot be bound (one rule for `serve`, `proxy` and `view`).

    A port in use is a failure of the run, not of its options: exit 1 with one line naming
    ``HOST:PORT`` and the reason, ending ``(choose another --port or --host)``.

    Args:
        error: what starting the server raised.
        host: the --host given.
        port: the --port given.

    Returns:
        `EXIT_FAILED` after reporting, or None when `error` is not a bind failure.
    """
    if not isinstance(error, OSError) or error.errno not in _BIND_ERRNOS:
        return None
    reason = error.strerror or str(error)
    where = f"{host}:{port}"
    text = reason if where in reason else f"{where}: {reason[:1].lower()}{reason[1:]}"
    return report_error(f"{text} (choose another --port or --host)", EXIT_FAILED)


def exit_code_for(error: BaseException) -> int:
    """The exit code of a reported error: 2 for a usage error (`USAGE_ERRORS`), else 1.

    Args:
        error: the exception.

    Returns:
        `EXIT_USAGE` or `EXIT_FAILED`.
    """
    return EXIT_USAGE if isinstance(error, USAGE_ERRORS) else EXIT_FAILED


def report_error(error: BaseException | str, code: int | None = None, *, note: str | None = None,
                 stream: TextIO | None = None) -> int:
    """Write ``error: ...`` (one line) to stderr and return the exit code.

    Args:
        error: the exception or message.
        code: the exit code (default: `exit_code_for` of an exception, `EXIT_FAILED` for a message).
        note: appended after ``; `` (e.g. what was left untouched).
        stream: where to write (default `sys.stderr`).

    Returns:
        The exit code, for ``return report_error(...)``.
    """
    line = error_line(error)
    if note:
        line += f"; {note}"
    print(f"error: {line}", file=stream or sys.stderr, flush=True)
    if isinstance(error, BaseException):
        log.debug("the reported error's traceback", exc_info=error)
    if code is None:
        code = exit_code_for(error) if isinstance(error, BaseException) else EXIT_FAILED
    return code
