"""What Responses API clients (Codex CLI, the openai-agents SDK) send back of a reasoning model's answer.

vLLM 0.32 with a reasoning parser answers `/v1/responses` with a `reasoning` item (`content:
[{"type": "reasoning_text", "text"}]`, `encrypted_content` null), a `message` item holding the content
as the parser left it (`"\\n\\nListing."`), and the `function_call` items. A client sends the output
items back as the next request's input, in one of these shapes (`ECHOES`):

- ``verbatim``: every output item as received (a client appending `response.output`);
- ``no_reasoning``: the reasoning items left out (a client keeping messages and calls only);
- ``summary_only``: each reasoning item's text as a `summary_text` part, `content` null (a client
  that keeps summaries only: vLLM reads the first summary when there is no content);
- ``empty_reasoning``: each reasoning item with `content` null and no summary (the item kept, its text
  not);
- ``encrypted``: each reasoning item with `encrypted_content` set (what OpenAI's own server round-trips;
  vLLM 0.32 refuses it: HTTP 400 "Encrypted content is not supported.").

Sessions (`drive`): ``tool_loop`` (one user message; each function call answered by a
`function_call_output`) and ``chat`` (a user message before each turn).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

__all__ = ["ECHOES", "TOOLS", "USER", "drive"]

#: a Responses function tool
TOOLS = [{"type": "function", "name": "bash", "description": "run a command", "strict": False,
          "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
#: the opening user message (an item with one `input_text` part, as Codex sends it)
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the commands"}]}


def _as_input(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as a client sends it back (`status` left out, message parts without logprobs)."""
    out = {k: v for k, v in item.items() if k != "status"}
    if item.get("type") == "message":
        out["content"] = [{"type": "output_text", "text": p["text"], "annotations": []} for p in item["content"]]
    return out


def _verbatim(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return items


def _no_reasoning(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if i["type"] != "reasoning"]


def _summary_only(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(i, content=None, summary=[{"type": "summary_text", "text": i["content"][0]["text"]}])
            if i["type"] == "reasoning" else i for i in items]


def _empty_reasoning(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(i, content=None, summary=[]) if i["type"] == "reasoning" else i for i in items]


def _encrypted(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(i, encrypted_content="gAAAAB-sealed") if i["type"] == "reasoning" else i for i in items]


#: echo shape -> the input items a client sends back for an answer's output items
ECHOES: dict[str, Callable[[list[dict[str, Any]]], list[dict[str, Any]]]] = {
    "verbatim": _verbatim, "no_reasoning": _no_reasoning, "summary_only": _summary_only,
    "empty_reasoning": _empty_reasoning, "encrypted": _encrypted,
}


async def drive(post: Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any]]], kind: str, turns: int,
                echo: str) -> list[dict[str, Any]]:
    """One Responses session; each answer's output goes back as `ECHOES[echo]` makes it.

    Args:
        post: sends the input items, returns the response object (None ends the session: refused).
        kind: ``tool_loop`` or ``chat``.
        turns: calls to make at most (a tool loop ends at an answer without a function call).
        echo: a key of `ECHOES`.

    Returns:
        The input items of the last call.
    """
    items: list[dict[str, Any]] = [] if kind == "chat" else [USER]
    for k in range(turns):
        if kind == "chat":
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"q{k}"}]})
        response = await post(items)
        if response is None:
            break
        output = [_as_input(i) for i in response["output"]]
        calls = [i for i in output if i["type"] == "function_call"]
        items = items + ECHOES[echo](output)
        items += [{"type": "function_call_output", "call_id": c["call_id"], "output": f"output {k}"} for c in calls]
        if not calls and kind != "chat":
            break
    return items
