"""The chat endpoint for a Harmony (gpt-oss) tokenizer: vLLM 0.32's gpt-oss path.

The prompt is rendered by `harmony_prompt_ids` (or taken from `kv_transfer_params.prompt_token_ids`,
which vLLM's Harmony path honours too), the policy's answer sampled as Harmony messages
(`harmony_reply_ids`) and parsed back as vLLM does (`HarmonyReplyParser`): the analysis channel is
`reasoning` (with `--reasoning-parser openai_gptoss`), the final channel `content`, commentary to
`functions.NAME` a tool call. A tool-call reply ends with `<|call|>` (finish `tool_calls`,
`stop_reason` 200012, a stop token id of gpt-oss's generation config), a final answer with
`<|return|>` (the eos: `stop_reason` null). `token_ids` and logprobs cover every sampled id.
`include_reasoning: false` hides the reasoning and, with it, `token_ids` and logprobs (vLLM does so
whenever a parser is set, which is always here: the backend serves as with
`--enable-auto-tool-choice --tool-call-parser openai`).
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

from starlette.responses import JSONResponse, Response, StreamingResponse

from rollout_dataset.backend import protocol as P
from rollout_dataset.backend.emitted import generate_choices
from rollout_dataset.backend.chat_stream import chat_stream
from rollout_dataset.backend.engine import Generation, TokenStep
from rollout_dataset.harmony import harmony_prompt_ids
from rollout_dataset.backend.harmony_reply import HarmonyReplyParser, harmony_reply_ids
from rollout_dataset.backend.params import (
    RequestError,
    bool_param,
    chat_inputs,
    check_context,
    common_params,
    logprob_params,
)
from rollout_dataset.backend.policies import PolicyOutput, PolicyRequest
from rollout_dataset.backend.reused_prompt import reused_prompt_ids

__all__ = ["harmony_chat", "harmony_request_prompt"]


def harmony_request_prompt(state: Any, body: dict, messages: list[dict], tools: list[dict] | None) -> list[int]:
    """The prompt ids of a chat request to a Harmony backend (also `/tokenize`'s render).

    Args:
        state: the `BackendState`.
        body: the request body (`reasoning_effort` is read).
        messages: its messages.
        tools: its tools (kept with `tool_choice: none`, as vLLM does by default).

    Returns:
        The ids.

    Raises:
        RequestError: a `reasoning_effort` Harmony does not take, or a message it cannot render.
    """
    effort = body.get("reasoning_effort")
    try:
        return harmony_prompt_ids(state.tokenizer.encoding, messages, tools, effort, state.tokenizer.start_date)
    except ValueError as exc:
        raise RequestError(str(exc), param="reasoning_effort" if "reasoning_effort" in str(exc) else "messages") \
            from None


async def harmony_chat(state: Any, body: dict, respond: Callable[[Any, PolicyRequest], Awaitable[PolicyOutput]]
                       ) -> Response:
    """Answer one chat completion request on a Harmony backend.

    Args:
        state: the `BackendState` (its tokenizer a `HarmonyTokenizer`).
        body: the parsed request body.
        respond: the app's policy call.

    Returns:
        The JSON or SSE response.

    Raises:
        RequestError: a bad parameter (vLLM's 400 body).
    """
    messages, tools, tool_choice, _ = chat_inputs(body)
    common = common_params(body, state.served_model_name, state.max_model_len, state.return_tokens_as_token_ids)
    want_logprobs, top_k = logprob_params(body)
    tok = state.tokenizer
    reused = reused_prompt_ids(body, messages, len(tok))
    prompt_ids = reused if reused is not None else harmony_request_prompt(state, body, messages, tools)
    max_tokens = check_context(state.max_model_len, len(prompt_ids), common.max_tokens)
    parse_tools = bool(tools) and tool_choice != "none"
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    req = PolicyRequest(messages=messages, tools=tools, tool_choice=tool_choice, seed=common.seed,
                        sampling=common.sampling, turn=turn, endpoint="chat", model=common.model)
    gens = await generate_choices(state, respond, req, common, prompt_ids, max_tokens,
                                  reply_ids=lambda out: harmony_reply_ids(tok, out), stop_token_ids=tok.stop_token_ids)
    hide = not bool_param(body, "include_reasoning", True)
    if hide:
        want_logprobs = False
    fmt = P.TokenFormatter(tok, state.model, common.as_token_ids)
    rid, created = P.chat_completion_id(), P.now()
    if common.stream:
        return StreamingResponse(_stream(state, common, gens, fmt, rid, created, prompt_ids,
                                         want_logprobs, top_k, tool_choice, hide),
                                 media_type="text/event-stream")
    choices, reasoning_tokens = [], 0
    for i, g in enumerate(gens):
        parser = HarmonyReplyParser(tok, state.harmony_reasoning, parse_tools)
        reasoning, content, calls = parser.parse(g.token_ids)
        reasoning_tokens += parser.reasoning_tokens
        finish = g.finish_reason
        if calls and tool_choice in (None, "auto"):
            finish = "tool_calls"
        elif tool_choice == "required" and finish == "stop":
            finish = "tool_calls"
        if tool_choice == "required" or isinstance(tool_choice, dict):
            content = content or ""
        logprobs = P.chat_logprobs(g.steps, fmt, top_k) if want_logprobs else None
        choices.append(P.chat_choice(i, content, calls, logprobs, finish, g.stop_reason,
                                     g.token_ids if common.return_token_ids and not hide else None,
                                     None if hide else reasoning))
    n_out = sum(len(g.steps) for g in gens)
    usage = P.usage_dict(len(prompt_ids), n_out, reasoning_tokens=reasoning_tokens if state.harmony_reasoning else None)
    return JSONResponse(P.chat_response(rid, created, common.model, choices, usage, state.fingerprint,
                                        prompt_ids if common.return_token_ids else None))


class _HarmonyDeltas:
    """A Harmony choice's tokens as deltas, parsed as vLLM streams them. vLLM streams a call to
    functions.* as tool_calls whatever the request's tools (its tool parser is server-wide); only the
    unstreamed message checks them (seen on vLLM 0.32). With the reasoning hidden, a delta with
    neither content nor tool calls is not sent."""

    def __init__(self, state: Any, hide: bool) -> None:
        self.parser = HarmonyReplyParser(state.tokenizer, state.harmony_reasoning, True)
        self.hide = hide
        self.tools_streamed = False

    def delta(self, step: TokenStep, last: bool) -> dict[str, Any] | None:
        delta = self.parser.feed(step.token_id)
        if last:
            rest = self.parser.finish()
            if rest:
                delta = {**(delta or {}), "content": (delta or {}).get("content", "") + rest}
        if delta and "tool_calls" in delta:
            self.tools_streamed = True
        if self.hide and delta and not delta.get("content") and not delta.get("tool_calls"):
            delta = None
        return delta


def _stream(state: Any, common: Any, gens: list[Generation], fmt: P.TokenFormatter, rid: str, created: int,
            prompt_ids: list[int], want_logprobs: bool, top_k: int, tool_choice: Any,
            hide: bool) -> AsyncIterator[bytes]:
    readers: list[_HarmonyDeltas] = []

    def reader(_: Generation) -> _HarmonyDeltas:
        readers.append(_HarmonyDeltas(state, hide))
        return readers[-1]

    def reasoning_tokens() -> int | None:
        return sum(r.parser.reasoning_tokens for r in readers) if state.harmony_reasoning else None

    return chat_stream(state, common, gens, fmt, rid, created, prompt_ids, want_logprobs, top_k, tool_choice, hide,
                       reader, reasoning_tokens)
