"""Tool definitions as vLLM 0.32 hands them to the chat template: the one definition of that shape.

vLLM validates each chat tool into its request model (`ChatCompletionToolsParam`, a `FunctionDefinition`
inside) and renders the model's dump, not the JSON the client sent: keys in the model's order, a
missing `description` or `parameters` written as null, `strict`/`defer_loading` only when set, a
tool-level `defer_loading` copied into the function and kept, other keys dropped. The Responses and
Messages paths turn their tools into the same `FunctionDefinition`. The local backend renders with
these (after validating, as vLLM does), and the export re-renders recorded requests with them, so a
re-render equals what the server showed the model.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["function_tool", "template_tool", "template_tools"]


def function_tool(tool: Mapping[str, Any], name: str | None) -> dict[str, Any]:
    """A function tool as vLLM 0.32 hands it to the chat template: its `FunctionDefinition` dumped.

    Args:
        tool: the definition's fields (`description`, `parameters`, `strict`, `defer_loading`; others ignored).
        name: the function's name.

    Returns:
        ``{"type": "function", "function": {"name", "description", "parameters", "strict"?, "defer_loading"?}}``:
        in that key order, `description` and `parameters` kept when null, `strict` and `defer_loading` only when set.
    """
    fn: dict[str, Any] = {"name": name, "description": tool.get("description"), "parameters": tool.get("parameters")}
    for key in ("strict", "defer_loading"):
        if tool.get(key) is not None:
            fn[key] = tool[key]
    return {"type": "function", "function": fn}


def template_tool(tool: Any) -> Any:
    """One chat-completions tool as vLLM 0.32 renders it (its `ChatCompletionToolsParam` dumped).

    Args:
        tool: the tool as the client sent it (already validated, or read back from a record).

    Returns:
        The dumped tool; a tool vLLM's model would refuse (no function object, no string name) is
        returned as sent: the server answered such a request with a 400, so nothing was rendered.
    """
    fn = tool.get("function") if isinstance(tool, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        return tool
    outer_defer, inner_defer = tool.get("defer_loading"), fn.get("defer_loading")
    rendered = function_tool({**fn, "defer_loading": outer_defer if inner_defer is None else inner_defer}, fn["name"])
    if outer_defer is not None:
        rendered["defer_loading"] = outer_defer
    return rendered


def template_tools(tools: Any) -> list[Any] | None:
    """A chat request's `tools` as vLLM 0.32 renders them (`template_tool` each).

    Args:
        tools: the request's `tools` (None, or a list).

    Returns:
        The rendered list, or None when there are none (or `tools` is not a list).
    """
    if not isinstance(tools, list) or not tools:
        return None
    return [template_tool(t) for t in tools]
