"""JSON in and out of the proxy's hot path: parse as the standard library does, encode records fast.

Bodies are parsed with the standard library's C scanner (orjson would be faster, but it turns
integers beyond 64 bits into floats, which would change what is forwarded and recorded). Trace
lines are encoded with orjson, a tenth of the standard encoder's CPU on token id and logprob
lists; a parsed line holds exactly the same values (both encoders write the shortest float that
round-trips). The one thing orjson cannot write is a non-finite float (it writes ``null``, where
the standard encoder writes ``NaN``/``Infinity``), so `loads` reports whether a body held such a
constant, and a call that saw one has its record encoded by the standard library, as before.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["loads", "encode_record"]


class _NonFinite(Exception):
    """A NaN/Infinity constant was met while parsing."""


def _reject_constant(name: str) -> float:
    raise _NonFinite(name)


_FINITE_ONLY = json.JSONDecoder(parse_constant=_reject_constant)


def loads(data: bytes | str) -> tuple[Any, bool]:
    """Parse JSON exactly as `json.loads` does, and tell whether it held NaN or infinities.

    Args:
        data: the JSON text (bytes in any encoding `json.loads` detects, or str).

    Returns:
        ``(value, nonfinite)``: the parsed value, and True when the text used a ``NaN``,
        ``Infinity`` or ``-Infinity`` constant.

    Raises:
        ValueError: the text is not valid JSON (`json.JSONDecodeError`, the same message as
            `json.loads`), or bytes that are not valid in their detected encoding.
    """
    try:
        return _loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deep to parse (more than about 900 levels)") from None


def _loads(data: bytes | str) -> tuple[Any, bool]:
    if isinstance(data, str):
        if data.startswith("\ufeff"):
            return json.loads(data), False  # raises json's own "Unexpected UTF-8 BOM" error
        text = data
    else:
        text = data.decode(json.detect_encoding(data), "surrogatepass")
    try:
        return _FINITE_ONLY.decode(text), False
    except _NonFinite:
        return json.loads(text), True


def encode_record(record: dict[str, Any], nonfinite: bool = False) -> bytes:
    """One trace record as compact UTF-8 JSON, without a trailing newline.

    Args:
        record: the record (JSON values only).
        nonfinite: the record may hold NaN or infinite floats; they are written as the
            standard library writes them (``NaN``, ``Infinity``) rather than as ``null``.

    Returns:
        The encoded record.

    Raises:
        TypeError: a value is not JSON-serialisable.
    """
    if not nonfinite:
        try:
            return orjson.dumps(record)
        except TypeError:  # e.g. an integer beyond 64 bits or a lone surrogate: the standard encoder decides
            pass
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: written as a \uXXXX escape, which JSON allows
        return json.dumps(record, ensure_ascii=True, separators=(",", ":")).encode("ascii")
