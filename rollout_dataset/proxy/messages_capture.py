"""Token capture for the Anthropic Messages API (`/v1/messages`), through vLLM's chat endpoint.

vLLM's native `/v1/messages` cannot return token ids or logprobs. The proxy therefore sends a Messages
call upstream as the chat completion vLLM's Anthropic layer builds from it
(`rollout_dataset.wire.anthropic_chat.messages_to_chat`), with `return_token_ids` and `logprobs`
added, and answers the harness with the Messages answer vLLM's native endpoint would have given
(`chat_to_message`, `ChatStreamToMessages`). The record keeps the Messages request and answer the
harness saw (`request`, `response`), the chat exchange that replaced it (`upstream`), and the token
fields read from the chat answer. `/v1/messages/count_tokens` is forwarded as it is (a
non-generation call).
"""

from __future__ import annotations

from typing import Any

from rollout_dataset.wire.anthropic_chat import anthropic_error, anthropic_error_type, chat_to_message
from rollout_dataset.schema.api_requests import messages_request_problem as messages_problem

__all__ = ["MESSAGES_ENDPOINT", "CHAT_ENDPOINT", "messages_problem", "translate_whole"]

MESSAGES_ENDPOINT = "/v1/messages"
CHAT_ENDPOINT = "/v1/chat/completions"
def translate_whole(chat: Any, status: int) -> dict[str, Any] | None:
    """The Messages answer for a whole chat answer (or its error), or None when it cannot be read.

    Args:
        chat: the parsed chat answer.
        status: its HTTP status.

    Returns:
        The message object, an Anthropic error body (status >= 400), or None.
    """
    if not isinstance(chat, dict):
        return None
    if status >= 400:
        error = chat.get("error")
        if not isinstance(error, dict):
            error = {}
        return anthropic_error(anthropic_error_type(status), str(error.get("message") or chat)[:4000])
    return chat_to_message(chat)
