"""The model server side of a capture: the local backend or a given URL, the model's name and
context length, the tokenizer, and the first model call's failure (named status and URL).

Every environment's capture goes through these (`rollout_dataset.capture.pipeline`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx

from rollout_dataset.server_runner import serve_in_thread
from rollout_dataset.envs.base import CaptureSettings
from rollout_dataset.errors import UpstreamError, UpstreamStatusError
from rollout_dataset.proxy.context_fit import CONTEXT_EXHAUSTED
from rollout_dataset.proxy.tokens import GENERATION_ENDPOINTS
from rollout_dataset.proxy.upstream import UpstreamTarget, parse_upstream

__all__ = ["first_call_failure", "upstream_target", "raise_first_call", "read_sealed_trace", "model_server",
           "resolve_model", "context_length", "load_offline_tokenizer", "IMPORT_LOCK"]

logger = logging.getLogger(__name__)

#: transformers' lazy imports are not thread-safe (concurrent captures load tokenizers under it).
IMPORT_LOCK = threading.Lock()


def first_call_failure(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first generation call, if it failed (HTTP 4xx/5xx or no answer at all).

    Args:
        records: trace records in arrival order.

    Returns:
        That record, or None when the first generation call succeeded (or none was made yet).
    """
    for record in records:
        if record.get("endpoint") not in GENERATION_ENDPOINTS:
            continue
        if (record.get("error") or {}).get("kind") == CONTEXT_EXHAUSTED:
            return None  # the proxy's own answer: the rollout ends with stop reason context_exhausted
        status = record.get("status")
        if (isinstance(status, int) and status >= 400) or (status is None and record.get("error")):
            return record
        return None
    return None


def upstream_target(base_url: str, api_key: str | None) -> UpstreamTarget:
    """The capture's upstream: credentials of the URL or the real key, for the proxy only.

    Userinfo in the URL wins over the key (the key is then not sent; logged without its value).

    Args:
        base_url: the model server's base URL (the local backend's, or ``--base-url``).
        api_key: the real upstream key, or None.

    Returns:
        The parsed upstream (`rollout_dataset.proxy.upstream.parse_upstream`).

    Raises:
        ValueError: not an http(s) URL (the message shows it redacted).
    """
    target = parse_upstream(base_url)
    if target.authorization is None and api_key:
        return parse_upstream(base_url, api_key)
    if target.authorization is not None and api_key:
        logger.info("the upstream URL %s carries credentials: OPENAI_API_KEY is not sent to it", target.display)
    return target


def raise_first_call(record: dict[str, Any], target: UpstreamTarget) -> None:
    """Raise the error a failed first generation call means (its URL and body redacted).

    Args:
        record: the failed call's trace record.
        target: the upstream.

    Raises:
        UpstreamStatusError: the server answered 4xx/5xx (status, URL and the error's message).
        UpstreamError: the server could not be reached.
    """
    url = target.shown(record.get("endpoint") or "/v1/chat/completions")
    status = record.get("status")
    body = ""
    response = record.get("response")
    if isinstance(response, dict):
        err = response.get("error")
        body = target.scrub(str(err.get("message", err) if isinstance(err, dict) else (err or "")))[:300]
    if isinstance(status, int) and status >= 400 and status != 502:
        raise UpstreamStatusError(status, url, body)
    message = target.scrub(str((record.get("error") or {}).get("message", "no answer")))
    if isinstance(status, int):
        raise UpstreamStatusError(status, url, message)
    raise UpstreamError(f"model server unreachable at {url}: {message}")


def read_sealed_trace(path: Path, seal: Any) -> list[dict[str, Any]]:
    """The session's records, checked against the proxy's seal (count and last digest) and chain.

    Raises:
        TraceIntegrityError: the file is gone, cut, reordered or edited (names the file and record).
    """
    from rollout_dataset.errors import TraceIntegrityError
    from rollout_dataset.proxy import read_trace

    if not path.exists():
        if seal.records:
            raise TraceIntegrityError(str(path), 0, f"the proxy wrote {seal.records} record(s) but the file is gone")
        return []
    return read_trace(path, seal=seal)


def _model_cards(target: UpstreamTarget) -> list[Any]:
    """The server's `/v1/models` list.

    Raises:
        UpstreamError: the server is unreachable or answers no model list (the URL shown redacted).
    """
    shown = target.shown("/v1/models")
    try:
        response = target.get("/v1/models")
    except httpx.HTTPError as exc:
        raise UpstreamError(f"model server unreachable at {shown}: {target.scrub(str(exc))}") from None
    if response.status_code >= 400:
        raise UpstreamStatusError(response.status_code, shown, target.scrub(response.text))
    try:
        cards = response.json()["data"]
    except (ValueError, KeyError, TypeError):
        raise UpstreamError(f"{shown} lists no model; pass --model") from None
    return cards if isinstance(cards, list) else []


def resolve_model(settings: CaptureSettings, target: UpstreamTarget) -> str:
    """The model name: the settings', the local backend's served name, else the server's first model.

    Raises:
        UpstreamError: the server lists no model (pass --model).
    """
    if settings.model:
        return settings.model
    if not settings.base_url:
        return settings.served_model_name
    try:
        return _model_cards(target)[0]["id"]
    except (KeyError, IndexError, TypeError):
        raise UpstreamError(f"{target.shown('/v1/models')} lists no model; pass --model") from None


def context_length(settings: CaptureSettings, target: UpstreamTarget, model: str) -> int | None:
    """The model's `max_model_len` as the server reports it (None when it does not say)."""
    if not settings.base_url:
        return settings.local_max_model_len
    try:
        cards = _model_cards(target)
    except UpstreamError as exc:  # the harness's own first call will name the failure
        logger.warning("context length of %s unknown: %s", model, exc)
        return None
    for card in cards:
        if isinstance(card, dict) and card.get("id") == model and isinstance(card.get("max_model_len"), int):
            return card["max_model_len"]
    return None


def _cached_or_local(name: str) -> bool:
    """True when `name` is `builtin`, a local folder, or a Hub id whose tokenizer is in the HF cache."""
    if name == "builtin" or Path(name).expanduser().exists():
        return True
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "tokenizer_config.json")
    except Exception:  # noqa: BLE001 - not a valid repo id
        return False
    return isinstance(found, str)


def load_offline_tokenizer(name: str, *, allow_download: bool = True) -> Any:
    """The capture's tokenizer for the cross-check and samples.md, or None (logged) when it cannot be had.

    Args:
        name: a tokenizer folder, a Hub id, or ``"builtin"``.
        allow_download: fetch a Hub tokenizer that is not cached (False: only a local or cached one).

    Returns:
        A transformers tokenizer, or None when it is not cached (without `allow_download`) or fails to load.
    """
    from rollout_dataset.tokenizers import load_tokenizer

    if not allow_download and not _cached_or_local(name):
        logger.warning("tokenizer %r is not cached locally (pass --tokenizer to fetch it): samples.md is written "
                       "without the token stream", name)
        return None
    try:
        with IMPORT_LOCK:
            return load_tokenizer(name)
    except Exception as exc:  # noqa: BLE001 - a missing tokenizer only costs the cross-check and the samples
        logger.warning("tokenizer %r not available (%s): samples.md is written without the token stream", name, exc)
        return None


@contextlib.contextmanager
def model_server(settings: CaptureSettings) -> Iterator[tuple[str, Any]]:
    """The upstream of a capture: `settings.base_url`, or the local backend with the environment's player.

    Args:
        settings: the capture's settings (`backend_policy`, `policy_options`, `tokenizer`, ...).

    Yields:
        `(upstream base URL, tokenizer or None)`: the local backend's tokenizer, None for a given URL.

    Raises:
        ValueError: an unknown policy, or `script` without a script file.
    """
    if settings.base_url:
        yield settings.base_url.rstrip("/"), None
        return
    from rollout_dataset.backend import LocalBackend, make_policy
    from rollout_dataset.envs.registry import register_builtin_policies
    from rollout_dataset.tokenizers import load_tokenizer

    with IMPORT_LOCK:
        register_builtin_policies()
        tokenizer = load_tokenizer(settings.tokenizer or "builtin")
    options = dict(settings.policy_options)
    if settings.backend_policy == "script" and not options.get("script"):
        raise ValueError("--policy script needs --script FILE")
    with IMPORT_LOCK:
        policy = make_policy(settings.backend_policy, **options)
    extra: dict[str, Any] = {}
    if settings.local_max_model_len is not None:
        extra["max_model_len"] = settings.local_max_model_len
    with serve_in_thread(lambda: LocalBackend(tokenizer=tokenizer, policy=policy,
                                              served_model_name=settings.served_model_name, **extra),
                         name="local-backend") as backend:
        yield backend.base_url, tokenizer
