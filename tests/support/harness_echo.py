"""What harnesses send back of a reasoning model's reply, and sessions driven that way (tests and bench).

vLLM 0.32's reasoning parsers (and the local backend, which matches them) answer with the reasoning in
the message's ``reasoning`` key and ``content`` as it came after ``</think>``, leading whitespace kept:
``"\\n\\nHello! How can I help?"``, and ``"\\n\\nLet me look.\\n"`` before a hermes tool call. Harnesses
send that back in one of these shapes (`ECHOES`):

- ``verbatim``: the message as received, ``reasoning`` key included (a client that appends the
  response message as it came; transformers hands a ``reasoning`` key to the template as
  ``reasoning_content``, so the template reads it);
- ``content_only``: ``content`` and ``tool_calls`` only (a hand-written OpenAI-SDK loop, most clients);
- ``reasoning_content``: content verbatim, reasoning as ``reasoning_content`` (opencode, LiteLLM as
  mini-swe-agent uses it);
- ``think_block``: the reasoning put back into ``content`` as ``<think>...</think>`` before it;
- ``stripped``: content stripped of whitespace at both ends, no reasoning (clients that trim text);
- ``harmony_reasoning``: gpt-oss: content as received, the analysis as ``reasoning``.

Sessions (`drive`): ``chat`` (a user message before each turn: also terminus-2's shape, whose every
observation is a user message), ``tool_loop`` (one user message, tool calls answered by tool
messages, a final answer) and ``loop_then_chat`` (a tool loop, then a new user message and one more
turn: opencode's next prompt in a session).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

__all__ = ["ECHOES", "TOOLS", "drive", "script_steps"]

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                                                          "required": ["cmd"]}}}]


def _verbatim(reply: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in reply.items() if v is not None}


def _content_only(reply: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": reply.get("content") or ""}


def _reasoning_content(reply: dict[str, Any]) -> dict[str, Any]:
    sent = _content_only(reply)
    if reply.get("reasoning"):
        sent["reasoning_content"] = reply["reasoning"]
    return sent


def _think_block(reply: dict[str, Any]) -> dict[str, Any]:
    sent = _content_only(reply)
    if reply.get("reasoning"):
        sent["content"] = f"<think>{reply['reasoning']}</think>{sent['content']}"
    return sent


def _stripped(reply: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": (reply.get("content") or "").strip()}


def _harmony_reasoning(reply: dict[str, Any]) -> dict[str, Any]:
    sent: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if reply.get("reasoning"):
        sent["reasoning"] = reply["reasoning"]
    return sent


#: echo shape -> the assistant message a harness sends back for a parsed reply (tool calls added by `drive`)
ECHOES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "verbatim": _verbatim, "content_only": _content_only, "reasoning_content": _reasoning_content,
    "think_block": _think_block, "stripped": _stripped, "harmony_reasoning": _harmony_reasoning,
}


def script_steps(kind: str, turns: int, *, harmony: bool = False) -> list[dict[str, Any]]:
    """A thinking model's script: reasoning, then an answer (``chat``) or text and a tool call.

    Args:
        kind: ``chat``, ``tool_loop`` or ``loop_then_chat``.
        turns: agent turns.
        harmony: gpt-oss (an analysis message, then a commentary tool call or a final answer).

    Returns:
        The script's steps (the local backend's ``--policy script``).
    """
    if kind == "chat":
        return [{"reasoning": f"Thinking about {k}.", "text": "Hello! How can I help?"} for k in range(turns)]
    loop_turns = turns - 1 if kind == "loop_then_chat" else turns
    text = "" if harmony else "Let me look.\n"  # the hermes parser leaves this newline in content
    calls = [{"reasoning": f"Plan {k}.", "text": text,
              "tool_calls": [{"name": "bash", "arguments": {"cmd": f"echo {k}"}}]} for k in range(loop_turns - 1)]
    after = [{"reasoning": "Another question.", "text": "Hello again."}] if kind == "loop_then_chat" else []
    return calls + [{"reasoning": "All done.", "text": "Done."}] + after


async def drive(post: Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any]]], kind: str, turns: int,
                echo: str) -> None:
    """One agent session; each reply goes back as `ECHOES[echo]` makes it.

    Args:
        post: sends the messages, returns the answer's message.
        kind: ``chat``, ``tool_loop`` or ``loop_then_chat``.
        turns: agent turns.
        echo: a key of `ECHOES`.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."}]
    if kind != "chat":
        messages.append({"role": "user", "content": "run the commands"})
    for k in range(turns):
        if kind == "chat":
            messages.append({"role": "user", "content": f"question {k}"})
        reply = await post(messages)
        sent = ECHOES[echo](reply)
        calls = reply.get("tool_calls") or []
        if calls:
            sent["tool_calls"] = calls
        messages.append(sent)
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"output {k}"} for c in calls]
        if not calls and kind == "loop_then_chat" and k < turns - 1:
            messages.append({"role": "user", "content": "another question"})
        elif not calls and kind != "chat":
            break
