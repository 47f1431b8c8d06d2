"""What of a request may reach the trace: headers by allow-list, credential-looking body fields redacted.

Nothing here changes what the proxy forwards upstream; these functions only build the copies that
are written to the trace.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable

__all__ = [
    "REDACTED",
    "RECORDED_HEADERS",
    "HARNESS_SESSION_HEADERS",
    "recorded_headers",
    "harness_session_id",
    "redact_body",
    "is_credential_name",
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
    }
)
# Header prefixes that are recorded as well (SDK fingerprints such as x-stainless-lang).
_RECORDED_PREFIXES = ("x-stainless-",)

# Headers whose value names the harness's own session, in order of preference.
HARNESS_SESSION_HEADERS: tuple[str, ...] = ("x-session-id", "session_id", "session-id", "x-client-session-id")

# Parts of a header name that mark it as a credential even when an allow-list rule would admit it.
_CREDENTIAL_PARTS = ("auth", "key", "token", "secret", "cookie", "password", "passwd", "credential", "signature")

# Body field names (normalised: lower-case, '-' -> '_') that always carry a credential.
_CREDENTIAL_FIELDS = frozenset(
    {
        "api_key",
        "apikey",
        "token",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "authorization",
        "auth",
        "bearer",
        "cookie",
        "credentials",
        "private_key",
        "access_key",
        "secret_key",
        "session_token",
    }
)
_CREDENTIAL_SUFFIXES = ("_api_key", "_apikey", "_token", "_secret", "_password", "_passwd", "_access_key", "_secret_key")
# Singular *_token names that are vocabulary, not credentials (chat_template_kwargs may carry them).
_TOKENIZER_FIELDS = frozenset({"bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token"})
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
        The first non-empty value of `HARNESS_SESSION_HEADERS`, else None.
    """
    for name in HARNESS_SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return value
    return None


def is_credential_name(name: str) -> bool:
    """Whether a JSON field name looks like it carries a credential.

    Args:
        name: a field name from a request body.

    Returns:
        True for names such as ``api_key``, ``token``, ``password``, ``access_token``,
        ``client_secret``; False for sampling or tokenizer vocabulary such as ``max_tokens``
        or ``eos_token``.
    """
    key = name.lower().replace("-", "_")
    if key in _CREDENTIAL_FIELDS:
        return True
    if key in _TOKENIZER_FIELDS:
        return False
    return key.endswith(_CREDENTIAL_SUFFIXES)


def _redact(value: Any) -> tuple[Any, bool]:
    if isinstance(value, dict):
        changed = False
        out = {}
        for key, item in value.items():
            if isinstance(key, str) and key in _VERBATIM_FIELDS:
                out[key] = item
            elif isinstance(key, str) and item is not None and is_credential_name(key):
                out[key] = REDACTED
                changed = True
            else:
                new, sub = _redact(item)
                out[key] = new
                changed = changed or sub
        return (out, True) if changed else (value, False)
    if isinstance(value, list):
        changed = False
        items = []
        for item in value:
            new, sub = _redact(item)
            items.append(new)
            changed = changed or sub
        return (items, True) if changed else (value, False)
    return value, False


def redact_body(body: Any) -> Any:
    """A copy of a parsed request body with credential-looking fields replaced by ``[REDACTED]``.

    Model input (``messages``, ``prompt``, ``tools`` and schemas) is kept verbatim. The input is
    never modified; when nothing needs redacting the same object is returned.

    Args:
        body: the parsed JSON body (any JSON value).

    Returns:
        The body to record.
    """
    return _redact(body)[0]


def valid_session_id(session: str) -> bool:
    """Whether a session id is safe to use as a trace file name.

    Args:
        session: the candidate id.

    Returns:
        True for 1-128 letters, digits, ``.``, ``_`` or ``-`` (starting with a letter or digit,
        no ``..``).
    """
    return bool(_SAFE_SESSION.match(session)) and ".." not in session
