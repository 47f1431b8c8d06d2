"""A chat message's `content` as text: one reading of content parts for every layer (and
`is_json`, whether a text — a tool call's arguments — is one whole JSON value).

`content` is a string, None, or a list of parts (``{"type": "text", "text": ...}``, other part
types, and — as vLLM accepts them — bare strings). `text_parts` picks the parts' texts;
`content_text` joins them, with the content's other shapes (None, a string, any other JSON value)
read as the caller's format wants them. The options name the readings the package's formats differ
in (a Responses `refusal` part, a text field that is not a string), so each is said once here.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

__all__ = ["text_parts", "content_text", "json_text", "is_json"]


def text_parts(content: Any, *, strings: bool = True, refusals: bool = False,
               any_text: bool = False) -> list[str] | None:
    """The texts of a list of content parts, in order; parts without text give nothing.

    Args:
        content: a message's content.
        strings: a bare string part is a text (vLLM's reading); False: it gives nothing.
        refusals: a part without a string `text` gives its string `refusal` (the Responses API's
            refusal parts).
        any_text: a mapping part's `text` is read whatever its type, as ``str(value)`` (``""`` when
            absent); False: only a string `text` counts.

    Returns:
        The texts; None when `content` is not a list.
    """
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            if strings:
                texts.append(part)
        elif isinstance(part, Mapping):
            text = part.get("text")
            if any_text:
                texts.append(str(part.get("text", "")))
            elif isinstance(text, str):
                texts.append(text)
            elif refusals and isinstance(refusal := part.get("refusal"), str):
                texts.append(refusal)
    return texts


def json_text(value: Any) -> str:
    """Any JSON value as JSON text with the standard library's default separators (``", "``, ``": "``),
    non-ASCII kept (``json.dumps(value, ensure_ascii=False)``).

    Args:
        value: the value.

    Returns:
        The text.
    """
    return json.dumps(value, ensure_ascii=False)


def content_text(content: Any, *, other: Callable[[Any], str] = json_text, **parts: bool) -> str:
    """A message's content as one string.

    Args:
        content: a message's content.
        other: how content that is neither None, a string nor a list reads (default: as JSON).
        **parts: `text_parts`'s options (`strings`, `refusals`, `any_text`).

    Returns:
        ``""`` for None, a string as it is, a list's `text_parts` joined, else ``other(content)``.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = text_parts(content, **parts)
    return other(content) if texts is None else "".join(texts)


def is_json(text: str) -> bool:
    """Whether `text` is one whole JSON value (Python's `json` reading: NaN and Infinity included).

    Args:
        text: the text (a tool call's arguments, streamed or whole).

    Returns:
        True when it parses.
    """
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
