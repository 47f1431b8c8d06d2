"""A recorded call as chat: the one record -> chat mapping for every wire format the proxy records.

The graph (`rollout_dataset.graph`), the dataset's `conversations` and `trace` rows and the trace
sessions (`rollout_dataset.builder`) all read a recorded call through these functions, so a wire
format one of them understands, all of them do:

| endpoint | request as chat | answer as chat |
| --- | --- | --- |
| `/v1/chat/completions` | `messages`, `tools` | the first choice's `message` |
| `/v1/completions` | the `prompt` as one user message | the first choice's `text` |
| `/v1/responses` | `input` (+ `instructions`) as vLLM renders it (`wire.responses_chat`) | the output items as one assistant message |
| `/v1/messages` | the chat vLLM's Anthropic layer builds (`wire.anthropic_chat`) | text, `tool_use` and `thinking` blocks as one assistant message |

Pure functions: no I/O.
"""

from __future__ import annotations

from typing import Any

from rollout_dataset.wire.anthropic_chat import message_to_assistant, request_messages
from rollout_dataset.wire.responses_chat import input_to_messages, output_to_message, tools_to_chat

__all__ = ["call_api", "call_request_chat", "call_answer_chat"]


def call_api(record: dict[str, Any]) -> str:
    """Which API a recorded call spoke.

    Args:
        record: a trace record.

    Returns:
        ``"messages"`` (Anthropic), ``"responses"`` (OpenAI Responses), or ``"chat"`` (chat and
        text completions, and anything else).
    """
    endpoint = str(record.get("endpoint") or "").rstrip("/")
    if endpoint.endswith("/v1/messages"):
        return "messages"
    if endpoint.endswith("/responses"):
        return "responses"
    return "chat"


def call_request_chat(record: dict[str, Any]) -> tuple[list[Any] | None, list[Any]]:
    """A recorded call's request as chat messages and tools.

    Args:
        record: a trace record.

    Returns:
        ``(messages, tools)``: messages None when the request holds no conversation at all (not a
        generation request, or a body that was not an object); tools ``[]`` when none.
    """
    request = record.get("request")
    if not isinstance(request, dict):
        return None, []
    api = call_api(record)
    if api == "messages":
        if not isinstance(request.get("messages"), list):
            return None, []
        messages, tools = request_messages(request)
        return messages, list(tools or [])
    if api == "responses":
        if request.get("input") is None:
            return None, []
        return input_to_messages(request), list(tools_to_chat(request.get("tools")) or [])
    raw_tools = request.get("tools")
    tools = raw_tools if isinstance(raw_tools, list) else []
    if isinstance(request.get("messages"), list):
        return request["messages"], tools
    if "prompt" in request:  # /v1/completions
        return [{"role": "user", "content": request.get("prompt")}], tools
    return None, []


def call_answer_chat(record: dict[str, Any]) -> dict[str, Any] | None:
    """A recorded call's answer as one chat assistant message (its fields as the API gave them).

    Args:
        record: a trace record.

    Returns:
        The message, or None when the call has no answer.
    """
    response = record.get("response")
    if not isinstance(response, dict):
        return None
    api = call_api(record)
    if api == "messages":
        return message_to_assistant(response)
    if api == "responses":
        return output_to_message(response)
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    if isinstance(choice.get("message"), dict):
        return choice["message"]
    if "text" in choice:  # /v1/completions
        return {"role": "assistant", "content": choice.get("text")}
    return None
