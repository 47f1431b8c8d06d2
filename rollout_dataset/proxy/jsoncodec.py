"""JSON in and out of the proxy's hot path: parse as the standard library does, encode records fast.

Bodies and stream events are parsed to exactly what `json.loads` gives: by orjson (a fifth of the
standard scanner's CPU on token id and logprob lists) where it gives the same value, by the
standard library where it might not: integers of 19 digits or more (possibly beyond 64 bits,
which orjson turns into floats), NaN/Infinity, lone surrogates, out-of-range floats, a byte-order
mark, and any encoding but UTF-8 are all refused by orjson or caught by a cheap first look, and
then parsed by the standard library. Trace
lines are encoded with orjson, a tenth of the standard encoder's CPU on token id and logprob
lists; a parsed line holds exactly the same values (both encoders write the shortest float that
round-trips). The one thing orjson cannot write is a non-finite float (it writes ``null``, where
the standard encoder writes ``NaN``/``Infinity``), so `loads` reports whether a body held such a
constant, and a call that saw one has its record encoded by the standard library, as before.

Stream events (small, one per token, from the model server) are parsed by `loads_event`, which can
skip the look for long integers when the caller made it once for the whole network read; edited
events and bodies are encoded by `dumps_event`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["loads", "loads_event", "dumps_event", "dumps_standard", "encode_record", "has_digit_run"]


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


#: nesting every parser here takes (the standard library's limit is the recursion limit, near 900).
_SHALLOW = 512


def _depth_at_most(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests at most `limit` levels of arrays and objects."""
    if type(value) is not dict and type(value) is not list:
        return True
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        for child in (item.values() if type(item) is dict else item):
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
    return True


def _loads(data: bytes | str) -> tuple[Any, bool]:
    if isinstance(data, bytes):
        classes = data.translate(_CLASSES)  # one pass serves both looks below
        if _RUN not in classes or _LONG_INTEGER.search(data) is None:  # no integer of 19+ digits
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:  # NaN, lone surrogates, a BOM, UTF-16, invalid JSON: as json.loads does
                pass
            else:
                # orjson nests up to 1024 levels, the standard library stops near 900 (ValueError below):
                # a body with few brackets cannot be that deep; one with many is measured.
                if len(data) <= _SHALLOW or classes.count(b"[") <= _SHALLOW or _depth_at_most(value, _SHALLOW):
                    return value, False
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
    return dumps_standard(record)


def dumps_standard(value: Any) -> bytes:
    """Compact UTF-8 JSON by the standard library (NaN/Infinity written as such, integers of any size).

    Args:
        value: JSON values only.

    Returns:
        The encoded value; a lone surrogate (which UTF-8 cannot hold) is written as its ``\\uXXXX``
        escape, which JSON allows.

    Raises:
        TypeError: a value is not JSON-serialisable.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


# Integers of 19 digits or more may lie beyond 64 bits, which orjson would turn into floats. A cheap
# first look (digits map to "1", every other byte to "0": is there a run of 19?) clears nearly every
# event; the rare run is looked at again, where digits after a decimal point do not count.
_DIGITS = bytes(0x31 if 0x30 <= i <= 0x39 else 0x30 for i in range(256))
# the same, with an opening bracket ("[" or "{") mapped to "[": one translation gives the digit runs and
# the brackets' count (a bound on the nesting depth)
_CLASSES = bytes(0x31 if 0x30 <= i <= 0x39 else 0x5B if i in (0x5B, 0x7B) else 0x30 for i in range(256))
_RUN = b"1" * 19
_LONG_INTEGER = re.compile(rb"(?<![.0-9])[0-9]{19}")


def has_digit_run(data: bytes) -> bool:
    """Whether bytes hold 19 or more ASCII digits in a row (a first, cheap look for long integers).

    Args:
        data: any bytes (e.g. one network read of a stream).

    Returns:
        False when no JSON text within them can hold an integer of 19+ digits.
    """
    return _RUN in data.translate(_DIGITS)


def _may_hold_long_integer(data: bytes) -> bool:
    """Whether JSON bytes (UTF-8: digits and '.' are single bytes) may hold an integer of 19+ digits
    (fraction digits after a '.' do not count)."""
    return has_digit_run(data) and _LONG_INTEGER.search(data) is not None


def loads_event(data: str, digits_checked: bool = False) -> tuple[Any, bool]:
    """Parse one stream event's data to exactly what `loads` gives, at a third of its CPU.

    orjson parses when the text holds no integer of 19 or more digits (possibly beyond 64 bits,
    which orjson would turn into a float); whatever orjson refuses (NaN/Infinity, lone surrogates, numbers out of range) goes to
    `loads`. The one difference: orjson parses nesting up to 1024 levels where the standard library
    may stop a little earlier (the record then holds the value rather than the text).

    Args:
        data: the event's data (text).
        digits_checked: the caller knows the text holds no 19 digits in a row (`has_digit_run` was
            False for the bytes it came from): the look for long integers is skipped.

    Returns:
        ``(value, nonfinite)`` as `loads` returns them.

    Raises:
        ValueError: the text is not valid JSON (the message of `json.loads`).
    """
    if digits_checked or not _may_hold_long_integer(data.encode("utf-8", "surrogatepass")):
        try:
            return orjson.loads(data), False
        except orjson.JSONDecodeError:
            pass
    return loads(data)


def dumps_event(value: Any, nonfinite: bool = False) -> bytes:
    """Compact UTF-8 JSON of an edited stream event (orjson; the standard library for what orjson cannot write).

    Args:
        value: the event's parsed (and edited) data.
        nonfinite: the value may hold NaN/Infinity (written ``NaN``/``Infinity`` as the standard
            library writes them, not ``null``).

    Returns:
        The encoded data; a lone surrogate is written as its ``\\uXXXX`` escape.
    """
    if not nonfinite:
        try:
            return orjson.dumps(value)
        except TypeError:  # integers beyond 64 bits, lone surrogates
            pass
    return dumps_standard(value)
