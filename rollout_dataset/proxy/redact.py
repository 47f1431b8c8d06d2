"""What may be written anywhere: headers by allow-list, credential-looking names and URLs redacted.

One definition of the credential-name rule (`is_credential_name`), used for request body fields,
URL query parameters (`redact_url`) and environment variable names
(`rollout_dataset.capture.secrets`). Nothing here changes what the proxy forwards upstream; these
functions only build the copies that are written to traces, logs, error messages and artifacts.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable, overload
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from rollout_dataset.proxy.harness_sessions import HARNESS_SESSION_HEADERS, HARNESS_SESSION_RECORDED, harness_session

__all__ = [
    "REDACTED",
    "RECORDED_HEADERS",
    "HARNESS_SESSION_HEADERS",
    "recorded_headers",
    "harness_session_id",
    "redact_body",
    "is_credential_name",
    "name_words",
    "redact_url",
    "redact_urls_in_text",
    "STRONG_CREDENTIAL_WORDS",
    "WEAK_CREDENTIAL_WORDS",
    "valid_session_id",
]

REDACTED = "[REDACTED]"

# Request headers that may be written to the trace (lower-case). Everything else is dropped.
RECORDED_HEADERS: frozenset[str] = frozenset(
    {
        "accept",
        "content-type",
        "content-length",
        "user-agent",
        "x-session-id",
        "session_id",
        "session-id",
        "x-client-session-id",
        "x-rollout-session",
        "x-request-id",
        "x-client-request-id",
        "openai-beta",
        *HARNESS_SESSION_RECORDED,  # the harnesses' own session ids (`rollout_dataset.proxy.harness_sessions`)
    }
)
# Header prefixes that are recorded as well (SDK fingerprints such as x-stainless-lang).
_RECORDED_PREFIXES = ("x-stainless-",)


# Parts of a header name that mark it as a credential even when an allow-list rule would admit it.
_CREDENTIAL_PARTS = ("auth", "key", "token", "secret", "cookie", "password", "passwd", "credential", "signature")

# THE credential-name rule (one definition: body fields, URL query parameters, environment
# variables). A name is split into lower-case words at '_', '-', '.', spaces and camelCase
# boundaries ("OPENAI_API_KEY" -> openai/api/key, "clientSecret" -> client/secret). It is a credential
# name when
#   1. any word is a STRONG word (never sampling or tokenizer vocabulary), or
#   2. its LAST word is a WEAK word (key, token, auth, ...), and the name is not tokenizer vocabulary
#      (bos_token, eos_token, ...).
# Weak words count only at the end because the API vocabulary uses them as qualifiers:
# prompt_token_ids, stop_token_ids, return_token_ids (last word "ids"), max_tokens, completion_tokens,
# skip_special_tokens (plural "tokens"), top_k, keys, sort_keys (not "key").
STRONG_CREDENTIAL_WORDS: frozenset[str] = frozenset(
    {"secret", "secrets", "password", "passwords", "passwd", "passphrase", "credential", "credentials",
     "authorization", "apikey", "signature"}
)
WEAK_CREDENTIAL_WORDS: frozenset[str] = frozenset({"key", "token", "auth", "bearer", "cookie"})
# Singular *_token names that are vocabulary, not credentials (chat_template_kwargs may carry them).
_TOKENIZER_FIELDS = frozenset({"bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token",
                               "mask_token", "image_token", "video_token", "audio_token"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# Fields whose content is model input or a JSON schema, kept verbatim (a tool parameter may be
# called "password"; its schema is not a secret and the trace needs it to re-render the prompt).
_VERBATIM_FIELDS = frozenset(
    {"messages", "prompt", "tools", "functions", "response_format", "guided_json", "structured_outputs", "input"}
)

_SAFE_SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _header_is_credential(name: str) -> bool:
    return any(part in name for part in _CREDENTIAL_PARTS)


@functools.lru_cache(maxsize=1024)
def _recorded_name(raw_name: bytes) -> str | None:
    """The lower-case header name if the header may be recorded, else None (decided once per name)."""
    name = raw_name.decode("latin-1").lower()
    if name not in RECORDED_HEADERS and not name.startswith(_RECORDED_PREFIXES):
        return None
    if _header_is_credential(name):
        return None
    return name


def recorded_headers(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The allow-listed request headers, as they may be written to the trace.

    Args:
        headers: raw ASGI header pairs (lower-case names as bytes).

    Returns:
        Header name -> value for allow-listed headers only; names that look like credentials
        (authorization, api-key, cookie, ...) are never included, whatever the allow-list says.
    """
    out: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = _recorded_name(raw_name)
        if name is None:
            continue
        value = raw_value.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def harness_session_id(headers: dict[str, str]) -> str | None:
    """The harness's own session id, when one of the known headers carries it.

    Args:
        headers: recorded (allow-listed, lower-case) request headers.

    Returns:
        The harness's session (`rollout_dataset.proxy.harness_sessions.harness_session`), else None.
    """
    return harness_session(headers)[0]


def name_words(name: str) -> list[str]:
    """The lower-case words of a field, parameter or variable name (the unit the credential rule reads).

    Args:
        name: e.g. ``OPENAI_API_KEY``, ``clientSecret``, ``x-api-key``.

    Returns:
        E.g. ``["openai", "api", "key"]``, ``["client", "secret"]``, ``["x", "api", "key"]``.
    """
    return [w.lower() for w in _WORD_SPLIT.split(name) if w]


@functools.lru_cache(maxsize=4096)
def is_credential_name(name: str) -> bool:
    """Whether a name looks like it carries a credential (THE rule, see `STRONG_CREDENTIAL_WORDS`).

    Used for request body fields, URL query parameters and environment variable names.

    Args:
        name: a field, parameter or variable name.

    Returns:
        True for names such as ``api_key``, ``key``, ``token``, ``password``, ``access_token``,
        ``clientSecret``, ``credential``, ``Authorization``, ``OPENAI_API_KEY``; False for sampling
        and tokenizer vocabulary such as ``max_tokens``, ``prompt_token_ids``,
        ``completion_tokens``, ``top_k``, ``keys`` or ``eos_token``.
    """
    words = name_words(name)
    if not words:
        return False
    if any(word in STRONG_CREDENTIAL_WORDS for word in words):
        return True
    if words[-1] not in WEAK_CREDENTIAL_WORDS:
        return False
    return "_".join(words) not in _TOKENIZER_FIELDS


def _credential_paths(body: Any) -> list[list[Any]]:
    """Key paths of the fields to redact, found without recursion (any nesting depth is fine)."""
    # each visited container: (value, index of its parent entry, key in the parent)
    nodes: list[tuple[Any, int, Any]] = [(body, -1, None)]
    pending = [0]
    hits: list[tuple[int, Any]] = []
    while pending:
        index = pending.pop()
        value = nodes[index][0]
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and isinstance(value, dict):
                if key in _VERBATIM_FIELDS:
                    continue
                if item is not None and is_credential_name(key):
                    hits.append((index, key))
                    continue
            if isinstance(item, (dict, list)) and item:
                nodes.append((item, index, key))
                pending.append(len(nodes) - 1)
    paths = []
    for index, key in hits:
        path = [key]
        while index > 0:
            _, parent, step = nodes[index]
            path.append(step)
            index = parent
        paths.append(path[::-1])
    return paths


def redact_body(body: Any) -> Any:
    """A copy of a parsed request body with credential-looking fields replaced by ``[REDACTED]``.

    Model input (``messages``, ``prompt``, ``tools`` and schemas) is kept verbatim. The input is
    never modified; when nothing needs redacting the same object is returned.

    Args:
        body: the parsed JSON body (any JSON value).

    Returns:
        The body to record (containers on the way to a redacted field are copied, the rest shared).
    """
    if not isinstance(body, (dict, list)):
        return body
    paths = _credential_paths(body)
    if not paths:
        return body
    copies: dict[int, Any] = {id(body): _shallow_copy(body)}
    for path in paths:
        original, copy = body, copies[id(body)]
        for step in path[:-1]:
            child = original[step]
            child_copy = copies.get(id(child))
            if child_copy is None:
                child_copy = copies[id(child)] = _shallow_copy(child)
                copy[step] = child_copy
            original, copy = child, child_copy
        copy[path[-1]] = REDACTED
    return copies[id(body)]


def _shallow_copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value)


def valid_session_id(session: str) -> bool:
    """Whether a session id is safe to use as a trace file name.

    Args:
        session: the candidate id.

    Returns:
        True for 1-128 letters, digits, ``.``, ``_`` or ``-`` (starting with a letter or digit,
        no ``..``).
    """
    return bool(_SAFE_SESSION.match(session)) and ".." not in session


def _redacted_pairs(query: str) -> str:
    pairs = []
    for pair in query.split("&"):
        name, eq, _value = pair.partition("=")
        pairs.append(f"{name}={REDACTED}" if eq and is_credential_name(unquote_plus(name)) else pair)
    return "&".join(pairs)


@overload
def redact_url(url: str) -> str: ...
@overload
def redact_url(url: str | None) -> str | None: ...
def redact_url(url: str | None) -> str | None:
    """The URL as it may be shown or written: no userinfo, credential-looking query values redacted.

    ``http://user:pass@[::1]:8000/v1?api_key=s&api-version=2`` becomes
    ``http://[::1]:8000/v1?api_key=[REDACTED]&api-version=2``: the userinfo is dropped whole, the
    host (IPv6 brackets included) and port are kept as written, query parameters whose name is a
    credential name (`is_credential_name`) keep their name with the value ``[REDACTED]``, and the
    fragment is dropped. Text that is not a URL with a scheme and host is returned unchanged.

    Args:
        url: a URL, or None.

    Returns:
        The redacted URL (None for None).
    """
    if not url:
        return url
    return _redact_url(url)


@functools.lru_cache(maxsize=512)  # the proxy redacts the same few upstream URLs on every call
def _redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced IPv6 bracket: show nothing of the authority
        head, sep, _rest = url.partition("://")
        return f"{head}://{REDACTED}" if sep else url
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    query = _redacted_pairs(parts.query) if parts.query else ""
    return urlunsplit((parts.scheme, host, parts.path, query, ""))


_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`]+")


def redact_urls_in_text(text: str) -> str:
    """Every URL in a text passed through `redact_url` (for error messages and logs).

    Args:
        text: any text, e.g. an exception message.

    Returns:
        The text with userinfo and credential-looking query values removed from its URLs.
    """
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)) or "", text)
