"""vLLM's OpenAI-server wire format: the exact key sets of responses, stream chunks, logprobs,
usage and error bodies (checked against vLLM 0.32's CPU server, see tests/test_real_vllm_wire.py).

Notes on what vLLM does and this module reproduces:
- non-streaming responses carry every key, `null` when unused (`prompt_token_ids: null` and
  `token_ids: null` unless `return_token_ids`); the message has `tool_calls` only when tools were called;
- stream chunks carry only the keys vLLM sets: the first chat chunk (role delta) has top-level
  `prompt_token_ids`/`prompt_text`, later chunks `choices[i].token_ids`, the finishing chunk
  `stop_reason` (and `system_fingerprint` unless a usage chunk follows); the usage chunk has
  `choices: []`;
- chat `top_logprobs` lists the sampled token first, then the most likely others, `top_logprobs`
  entries in all; completions list up to `logprobs + 1` entries;
- with `return_tokens_as_token_ids` tokens read `token_id:N`; the sampled entry's `bytes` are still
  those of its text.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Sequence

from rollout_dataset.backend.bigram import BigramModel
from rollout_dataset.backend.engine import TokenStep

__all__ = [
    "EMULATED_VLLM_VERSION",
    "LOCAL_BACKEND_KIND",
    "error_body",
    "chat_completion_id",
    "completion_id",
    "usage_dict",
    "TokenFormatter",
    "chat_logprobs",
    "completion_logprobs",
    "chat_response",
    "chat_choice",
    "chat_chunk",
    "completion_response",
    "completion_choice",
    "completion_chunk",
    "usage_chunk",
    "now",
]

EMULATED_VLLM_VERSION = "0.32.0"
#: how the local backend names itself (`/version` "server", `system_fingerprint`, `/v1/models` owned_by):
#: it emulates vLLM's wire format but never claims to be vLLM.
LOCAL_BACKEND_KIND = "rollout-dataset-local-backend"
_LOGPROB_FLOOR = -9999.0


def now() -> int:
    """Returns: the current Unix time in whole seconds (the `created` field)."""
    return int(time.time())


def chat_completion_id() -> str:
    """Returns: a fresh chat completion id, `chatcmpl-<16 hex>`."""
    return f"chatcmpl-{secrets.token_hex(8)}"


def completion_id() -> str:
    """Returns: a fresh completion id, `cmpl-<16 hex>`."""
    return f"cmpl-{secrets.token_hex(8)}"


def error_body(message: str, type_: str = "BadRequestError", param: str | None = None, code: int = 400) -> dict:
    """vLLM's error body.

    Args:
        message: what went wrong.
        type_: `BadRequestError`, `NotFoundError`, `Bad Request` (request validation), ...
        param: the offending parameter, or None.
        code: the HTTP status.

    Returns:
        `{"error": {"message", "type", "param", "code"}}`.
    """
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def usage_dict(prompt_tokens: int, completion_tokens: int, full: bool = True,
               reasoning_tokens: int | None = None) -> dict:
    """The usage object (`full`: with the null detail keys of non-streaming responses).

    Args:
        prompt_tokens: number of prompt tokens.
        completion_tokens: number of generated tokens (all choices).
        full: include `prompt_tokens_details`/`completion_tokens_details` (null).
        reasoning_tokens: with a reasoning parser, vLLM 0.32 adds
            `completion_tokens_details: {"reasoning_tokens": N}` (streamed usage chunk too).

    Returns:
        The usage dict.
    """
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if full:
        usage["prompt_tokens_details"] = None
        usage["completion_tokens_details"] = None
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


class TokenFormatter:
    """Token strings and alternatives for logprobs.

    Args:
        tokenizer: the serving tokenizer.
        model: the bigram model.
        as_token_ids: render tokens as `token_id:N`.
    """

    def __init__(self, tokenizer: Any, model: BigramModel, as_token_ids: bool) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.as_token_ids = as_token_ids
        self._text_cache: dict[int, str] = {}

    def text(self, token_id: int, held: Sequence[int] = ()) -> str:
        """The text a token adds after `held` ids whose bytes were held back, as vLLM decodes
        logprob tokens: "" while the UTF-8 character is still incomplete.

        Args:
            token_id: an id.
            held: earlier ids still waiting for the rest of their character.

        Returns:
            The decoded text.
        """
        if not held:
            out = self._text_cache.get(token_id)
            if out is None:
                out = self.tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
                out = "" if out.endswith("\ufffd") else out
                self._text_cache[token_id] = out
            return out
        out = self.tokenizer.decode([*held, token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return "" if out.endswith("\ufffd") else out

    def token(self, token_id: int, held: Sequence[int] = ()) -> str:
        """Args: token_id: an id. held: ids held back before it. Returns: the token string in logprobs."""
        return f"token_id:{token_id}" if self.as_token_ids else self.text(token_id, held)

    def alternatives(self, step: TokenStep, k: int) -> list[tuple[int, float]]:
        """The sampled token first, then the `k` most likely others (as vLLM's logprob dict).

        Args:
            step: the generated token.
            k: how many top alternatives were requested.

        Returns:
            `(token_id, logprob)` pairs.
        """
        out = [(step.token_id, step.logprob)]
        for tok, lp in self.model.top(step.prev_id, k):
            if tok != step.token_id:
                out.append((tok, lp))
        return out


def _floor(lp: float) -> float:
    return max(lp, _LOGPROB_FLOOR)


def chat_logprobs(steps: Sequence[TokenStep], fmt: TokenFormatter, top_k: int) -> dict:
    """Chat-completions logprobs for some generated tokens.

    Args:
        steps: the tokens.
        fmt: the token formatter.
        top_k: the request's `top_logprobs`.

    Returns:
        `{"content": [{token, logprob, bytes, top_logprobs}]}`.
    """
    content = []
    for step in steps:
        top = []
        for tok, lp in fmt.alternatives(step, top_k)[: max(top_k, 0)]:
            s = fmt.token(tok, step.held)
            top.append({"token": s, "logprob": _floor(lp), "bytes": list(s.encode("utf-8", errors="replace"))})
        content.append(
            {
                "token": fmt.token(step.token_id, step.held),
                "logprob": _floor(step.logprob),
                "bytes": list(fmt.text(step.token_id, step.held).encode("utf-8", errors="replace")),
                "top_logprobs": top,
            }
        )
    return {"content": content}


def completion_logprobs(steps: Sequence[TokenStep], fmt: TokenFormatter, k: int, initial_offset: int = 0) -> dict:
    """Legacy-completions logprobs for some generated tokens.

    Args:
        steps: the tokens.
        fmt: the token formatter.
        k: the request's `logprobs` (up to `k + 1` alternatives are listed).
        initial_offset: text offset of the first token.

    Returns:
        `{"text_offset", "token_logprobs", "tokens", "top_logprobs"}`.
    """
    offsets: list[int] = []
    lps: list[float] = []
    tokens: list[str] = []
    tops: list[dict[str, float]] = []
    offset = initial_offset
    for step in steps:
        tok = fmt.token(step.token_id, step.held)
        offsets.append(offset)
        offset += len(tok)
        tokens.append(tok)
        lps.append(_floor(step.logprob))
        top: dict[str, float] = {}
        for i, (alt, lp) in enumerate(fmt.alternatives(step, k)):
            if i <= k:
                top.setdefault(fmt.token(alt, step.held), _floor(lp))
        tops.append(top)
    return {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens, "top_logprobs": tops}


def chat_choice(
    index: int,
    content: str | None,
    tool_calls: list[dict],
    logprobs: dict | None,
    finish_reason: str,
    stop_reason: Any,
    token_ids: list[int] | None,
    reasoning: str | None = None,
) -> dict:
    """One choice of a non-streaming chat completion (vLLM's key set and order).

    Args:
        index: the choice index.
        content: the message content.
        tool_calls: parsed tool calls (the key is omitted when empty, as vLLM does).
        logprobs: the logprobs object or None.
        finish_reason: stop, length or tool_calls.
        stop_reason: the stop string, or None.
        token_ids: the generated ids (None unless `return_token_ids`).
        reasoning: the message's `reasoning` (vLLM 0.32's key; set by a reasoning parser).

    Returns:
        The choice dict.
    """
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    message["reasoning"] = reasoning
    return {
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "token_ids": token_ids,
        "routed_experts": None,
    }


def chat_response(
    id_: str,
    created: int,
    model: str,
    choices: list[dict],
    usage: dict,
    fingerprint: str,
    prompt_token_ids: list[int] | None,
) -> dict:
    """A non-streaming chat completion (vLLM's key set and order).

    Args:
        id_: the response id.
        created: Unix time.
        model: the served model name.
        choices: from `chat_choice`.
        usage: from `usage_dict`.
        fingerprint: the system fingerprint.
        prompt_token_ids: the prompt ids (None unless `return_token_ids`).

    Returns:
        The response dict.
    """
    return _response("chat.completion", id_, created, model, choices, usage, fingerprint,
                     prompt_logprobs=None, prompt_token_ids=prompt_token_ids, prompt_text=None)


def chat_chunk(id_: str, created: int, model: str, choice: dict, **top_level: Any) -> dict:
    """A chat stream chunk holding one choice.

    Args:
        id_: the response id.
        created: Unix time.
        model: the served model name.
        choice: the stream choice (only the keys vLLM sets).
        **top_level: extra top-level keys (`prompt_token_ids`, `prompt_text`, `system_fingerprint`).

    Returns:
        The chunk dict.
    """
    chunk = {"id": id_, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [choice]}
    chunk.update(top_level)
    return chunk


def streamed_finish_reason(finish_reason: str | None, tools_streamed: bool, tool_choice: Any) -> str | None:
    """A stream's finish reason as vLLM reports it: ``tool_calls`` once a tool call was streamed
    (unless a named tool was forced), else the generation's own.

    Args:
        finish_reason: the generation's finish reason.
        tools_streamed: whether any chunk streamed a tool call.
        tool_choice: the request's `tool_choice`.

    Returns:
        The finish reason to send.
    """
    if tools_streamed and finish_reason == "stop" and not isinstance(tool_choice, dict):
        return "tool_calls"
    return finish_reason


def step_choice(index: int, delta: dict[str, Any] | None, logprobs: Any, token_id: int, *, last: bool,
                send_ids: bool, finish_reason: str | None = None, stop_reason: Any = None) -> dict[str, Any] | None:
    """The stream choice of one sampled token, as vLLM sends it, or None when vLLM sends no chunk for it.

    Args:
        index: the choice's index.
        delta: the message delta the token makes (None: the parser held its text back).
        logprobs: the token's logprobs entry, or None.
        token_id: the sampled id.
        last: the generation's last token (the chunk then carries the finish and stop reasons).
        send_ids: whether the chunk carries ``token_ids``.
        finish_reason: the choice's finish reason (on the last token).
        stop_reason: the stop token or string (on the last token).

    Returns:
        The choice, or None for a held-back token that carries neither ids nor logprobs.
    """
    if delta is None:
        if not last and logprobs is None and not send_ids:
            return None
        delta = {}
    choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": logprobs}
    if not last:
        choice["finish_reason"] = None
    else:
        choice["finish_reason"] = finish_reason
        choice["stop_reason"] = stop_reason
    choice["token_ids"] = [token_id] if send_ids else None
    return choice


def usage_chunk(id_: str, created: int, model: str, obj: str, usage: dict, fingerprint: str) -> dict:
    """The final usage chunk of a stream (`choices: []`).

    Args:
        id_: the response id.
        created: Unix time.
        model: the served model name.
        obj: `chat.completion.chunk` or `text_completion`.
        usage: from `usage_dict(..., full=False)`.
        fingerprint: the system fingerprint.

    Returns:
        The chunk dict.
    """
    return {"id": id_, "object": obj, "created": created, "model": model, "choices": [], "usage": usage,
            "system_fingerprint": fingerprint}


def completion_choice(
    index: int,
    text: str,
    logprobs: dict | None,
    finish_reason: str,
    stop_reason: Any,
    token_ids: list[int] | None,
    prompt_token_ids: list[int] | None,
) -> dict:
    """One choice of a non-streaming text completion (vLLM's key set and order).

    Args:
        index: the choice index.
        text: the generated text.
        logprobs: the logprobs object or None.
        finish_reason: stop or length.
        stop_reason: the stop string, or None.
        token_ids: the generated ids (None unless `return_token_ids`).
        prompt_token_ids: the prompt ids (None unless `return_token_ids`).

    Returns:
        The choice dict.
    """
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "token_ids": token_ids,
        "prompt_logprobs": None,
        "prompt_token_ids": prompt_token_ids,
        "routed_experts": None,
    }


def completion_response(id_: str, created: int, model: str, choices: list[dict], usage: dict, fingerprint: str) -> dict:
    """A non-streaming text completion (vLLM's key set and order).

    Args:
        id_: the response id.
        created: Unix time.
        model: the served model name.
        choices: from `completion_choice`.
        usage: from `usage_dict`.
        fingerprint: the system fingerprint.

    Returns:
        The response dict.
    """
    return _response("text_completion", id_, created, model, choices, usage, fingerprint)


def _response(object_: str, id_: str, created: int, model: str, choices: list[dict], usage: dict, fingerprint: str,
              **own: Any) -> dict:
    """vLLM's non-streaming response in its key order: the head both endpoints share, the endpoint's `own`
    keys (in the order given), then the transfer parameters and metrics (null)."""
    return {"id": id_, "object": object_, "created": created, "model": model, "choices": choices,
            "service_tier": None, "system_fingerprint": fingerprint, "usage": usage, **own,
            "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}


def completion_chunk(id_: str, created: int, model: str, choice: dict, **top_level: Any) -> dict:
    """A text-completion stream chunk holding one choice.

    Args:
        id_: the response id.
        created: Unix time.
        model: the served model name.
        choice: `{index, text, logprobs, finish_reason, stop_reason, prompt_token_ids, token_ids}`.
        **top_level: extra top-level keys (`system_fingerprint`).

    Returns:
        The chunk dict.
    """
    chunk = {"id": id_, "object": "text_completion", "created": created, "model": model, "choices": [choice]}
    chunk.update(top_level)
    return chunk
