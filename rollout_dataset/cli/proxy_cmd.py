"""`rollout-dataset proxy`: run the recording proxy until Ctrl-C.

Prints the base URL once the proxy listens (one line, flushed), so scripts can read it.

The upstream is reached as httpx's ``trust_env`` reaches it: through the forward proxy
``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` name for it (CONNECT for https), directly for the
hosts of ``NO_PROXY``, and an https upstream verified against ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``
(else certifi's bundle); ``--no-trust-env`` ignores those variables (`rollout_dataset.proxy.trust_env`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names for annotations only; imported lazily where used
    from rollout_dataset.proxy.context_fit import ContextPolicy

import argparse
import asyncio
import os
import signal
import sys

__all__ = ["add_arguments", "add_context_arguments", "add_more_upstreams_argument", "add_session_api_arguments",
           "add_trust_env_argument", "context_policy", "run", "session_api_settings"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's options.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("--upstream", required=True, action="append", metavar="URL",
                        help="model server base URL, e.g. http://127.0.0.1:8000/v1; user:pass@ (Basic) or token@ "
                             "(Bearer) and ?query credentials are sent upstream only, never printed or recorded; "
                             "repeat it for several servers of the same model: each session sticks to one, new "
                             "sessions go to the least loaded healthy one (docs/proxy.md, Several model servers)")
    parser.add_argument("--trace-dir", required=True, help="directory for the <session>.jsonl trace files")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default 0: any free port)")
    parser.add_argument("--upstream-timeout", type=float, default=600.0,
                        help="seconds to wait for the model server's answer and between stream chunks")
    parser.add_argument("--max-body-mb", type=float, default=64.0, help="largest request body accepted, in MiB")
    parser.add_argument("--api-key-env", default=None, metavar="VAR",
                        help="read the real upstream key from environment variable VAR (e.g. OPENAI_API_KEY) and "
                             "send it upstream in place of the harness's Authorization (the harness then only "
                             "needs a dummy key); the key itself is never a flag")
    parser.add_argument("--max-inflight-mb", type=float, default=256.0,
                        help="request bodies plus buffered response bytes held by all calls at once, in MiB "
                             "(past it calls get 503, recorded)")
    parser.add_argument("--max-open-files", type=int, default=32,
                        help="trace files kept open at once (least recently used closed first)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="processes serving the port (default 1); each session still gets one trace file, one "
                             "gap-free arrival order and one chain; --max-inflight-mb and --max-open-files hold per "
                             "worker; a worker that dies is replaced")
    parser.add_argument("--on-policy", action="store_true", help="on-policy mode: multi-turn chat prompts are built from the ids the model sampled (vLLM >= 0.32 or the local backend; see docs/proxy.md, On-policy mode)")
    add_context_arguments(parser, fit_default=False)
    add_trust_env_argument(parser)
    add_session_api_arguments(parser)


def add_session_api_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the session API's options (docs/session-api.md).

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("--session-api-token", default=None, metavar="TOKEN",
                        help="bearer token every session API call (/sessions...) must carry; default: the "
                             "environment variable ROLLOUT_SESSION_API_TOKEN (which keeps it out of the process "
                             "list); without one the API is served on a loopback bind only")
    parser.add_argument("--no-session-api", dest="session_api", action="store_false", default=None,
                        help="turn the session API off (its paths answer 404)")
    parser.add_argument("--session-api-tokenizer", default=None, metavar="NAME",
                        help="tokenizer (name or path) the session API's export uses for retokenization findings, "
                             "as capture --tokenizer does")


def add_more_upstreams_argument(parser: argparse.ArgumentParser) -> None:
    """Declare `--upstream URL` (repeatable) for `capture` and `batch`: more servers of `--base-url`'s model.

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("--upstream", dest="more_upstreams", action="append", default=None, metavar="URL",
                        help="another model server serving the model of --base-url (repeat for more): the proxy "
                             "places each rollout on the least loaded healthy one and moves it off one that fails "
                             "(docs/proxy.md, Several model servers)")


def add_trust_env_argument(parser: argparse.ArgumentParser) -> None:
    """Declare `--no-trust-env` (proxy, capture and batch).

    Args:
        parser: the sub-command's parser.
    """
    parser.add_argument("--no-trust-env", dest="trust_env", action="store_false", default=True,
                        help="ignore HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY and SSL_CERT_FILE / SSL_CERT_DIR "
                             "for the model server (default: honoured as httpx and curl do)")


def _api_key(variable: str | None) -> str | None:
    """The upstream key from the named environment variable (None when no variable is named).

    Raises:
        ValueError: the variable is named but unset or empty.
    """
    if not variable:
        return None
    value = os.environ.get(variable)
    if not value:
        raise ValueError(f"--api-key-env {variable}: the environment variable {variable} is not set")
    return value


def add_context_arguments(parser: argparse.ArgumentParser, *, fit_default: bool) -> None:
    """Declare `--max-tokens-cap` and `--fit-context`/`--no-fit-context` (proxy, capture and batch).

    Args:
        parser: the sub-command's parser.
        fit_default: whether context fitting is on by default for this command.
    """
    parser.add_argument("--max-tokens-cap", type=int, default=None, metavar="N",
                        help="lower every generation call's max_tokens / max_completion_tokens / max_output_tokens "
                             "to at most N (recorded in upstream_changes)")
    parser.add_argument("--fit-context", dest="fit_context", action="store_true", default=fit_default,
                        help="lower output limits to what is left of the model's context (max_model_len from "
                             "/v1/models, prompt length from /tokenize)" + (" (default)" if fit_default else ""))
    parser.add_argument("--no-fit-context", dest="fit_context", action="store_false",
                        help="send output limits as the harness asked" + ("" if fit_default else " (default)"))


def context_policy(args: argparse.Namespace) -> ContextPolicy:
    """The `ContextPolicy` the context options ask for.

    Args:
        args: parsed options with `max_tokens_cap` and `fit_context`.

    Returns:
        The policy.

    Raises:
        ValueError: a cap below 1.
    """
    from rollout_dataset.proxy.context_fit import ContextPolicy

    return ContextPolicy(max_tokens_cap=args.max_tokens_cap, fit_context=args.fit_context)


def session_api_settings(args: argparse.Namespace) -> dict[str, Any]:
    """`CaptureProxy`'s session API arguments from the options (the token from the environment by default).

    Args:
        args: parsed options.

    Returns:
        ``session_api``, ``session_api_token`` and ``session_api_tokenizer``.
    """
    from rollout_dataset.proxy.session_api import SESSION_API_TOKEN_ENV

    wanted = getattr(args, "session_api", None)
    token = getattr(args, "session_api_token", None) or os.environ.get(SESSION_API_TOKEN_ENV) or None
    return {"session_api": wanted, "session_api_token": token if wanted is not False else None,
            "session_api_tokenizer": getattr(args, "session_api_tokenizer", None)}


async def _serve(args: argparse.Namespace) -> None:
    from rollout_dataset.proxy import CaptureProxy

    proxy = CaptureProxy(upstream=args.upstream, trace_dir=args.trace_dir, host=args.host, port=args.port,
                         upstream_timeout=args.upstream_timeout, max_body_bytes=int(args.max_body_mb * 1024 * 1024),
                         max_inflight_bytes=int(args.max_inflight_mb * 1024 * 1024),
                         max_open_files=args.max_open_files, api_key=_api_key(args.api_key_env),
                         on_policy=args.on_policy, context=context_policy(args), workers=args.workers,
                         trust_env=getattr(args, "trust_env", True), **session_api_settings(args))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    async with proxy:
        # uvicorn installs its own handlers while serving; route them to our stop event too.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(stop.set))
        print(proxy.base_url, flush=True)
        if len(proxy.upstreams) > 1:
            print(f"{len(proxy.upstreams)} model servers: {proxy.upstream}", file=sys.stderr, flush=True)
        print(f"recording to {proxy.trace_dir} (one <session>.jsonl per session); Ctrl-C stops",
              file=sys.stderr, flush=True)
        print(f"session API: {proxy.root_url}/sessions" if proxy.session_api else proxy.session_api_off_reason,
              file=sys.stderr, flush=True)
        await stop.wait()


def run(args: argparse.Namespace) -> int:
    """Run the proxy until interrupted.

    Args:
        args: the parsed options.

    Returns:
        0 after a clean stop, 2 for a bad upstream URL or key variable.

    An address that cannot be bound is reported as `bind_failure` says (exit 1).
    """
    import logging

    from rollout_dataset.proxy.server import new_event_loop

    if not getattr(args, "verbose", 0) or args.verbose < 2:  # one INFO line per forwarded call is too much
        logging.getLogger("httpx").setLevel(logging.WARNING)
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(args))
    except ValueError as exc:  # a bad --upstream or --api-key-env: the message shows the URL redacted
        from rollout_dataset.cli.reporting import EXIT_USAGE, report_error

        return report_error(exc, EXIT_USAGE)
    except OSError as exc:
        from rollout_dataset.cli.reporting import bind_failure

        failed = bind_failure(exc, args.host, args.port)
        if failed is None:
            raise
        return failed
    finally:
        loop.close()
    return 0
