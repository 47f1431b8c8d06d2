"""The local backend's `/v1/responses`: vLLM 0.32's Responses API for what Codex and the openai-agents
SDK use.

As vLLM does, the request's `instructions` and `input` items become chat messages
(`rollout_dataset.wire.responses_chat`), rendered with the chat template; the policy answers; tool
calls in the output, written and read by the serving `--tool-call-parser` as the chat endpoint's,
become `function_call` items. Supported: string or item `input`
(messages, `function_call`, `function_call_output`, `reasoning`), function `tools` and
`tool_choice`, `max_output_tokens`, `temperature`/`top_p`/`seed`, `stream` (vLLM's event sequence,
no `[DONE]`), `include: ["message.output_text.logprobs"]` (+ `top_logprobs`), and vLLM's
`enable_response_messages` (`input_messages`/`output_messages` with `raw_message_tokens`: the
prompt's and the output's token ids), and `kv_transfer_params.prompt_token_ids` (generate from those
ids, as vLLM 0.32's Responses endpoint does: seen on the genuine server; the input still drives the
parsing and the policy). Shapes were recorded from the genuine server
(tests/data/real_vllm_responses/) and are checked key by key in tests/test_real_vllm_wire.py.
Not supported (refused or ignored as noted): `previous_response_id` and `store` (nothing is
stored), built-in tools (dropped), `background`. On a Harmony (gpt-oss) backend the answer is
vLLM's gpt-oss Responses path instead (`rollout_dataset.backend.harmony_responses`).

With a reasoning parser (`serve --reasoning-parser qwen3`/`deepseek_r1`) the answer is split as the
chat path splits it (`rollout_dataset.backend.reasoning_parser`), as vLLM 0.32 answers (seen on the
genuine server serving the scripted Qwen3): a `reasoning` item first (`content: [{"type":
"reasoning_text"}]`, `encrypted_content` null, `status` null in a whole answer), then a `message` item
holding the content only when there is some (`"\n\nListing."`; its logprobs, in a whole answer,
cover every output token, the think block's included), then the function calls parsed from the
content; `usage.output_tokens_details.reasoning_tokens` counts the reasoning. Streamed, the reasoning
item comes first: `output_item.added` (content null, `in_progress`), `content_part.added`, one
`response.reasoning_text.delta` per reasoning token, `reasoning_text.done`, `content_part.done`,
`output_item.done`; the `<think>` and `</think>` tokens give no event. A reasoning item sent back with
`encrypted_content` set is refused as vLLM refuses it (400 "Encrypted content is not supported.",
param `input`), with or without a parser.
"""

from __future__ import annotations

import asyncio

import secrets
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from rollout_dataset.backend import protocol as P
from rollout_dataset.backend.emitted import emitted_text
from rollout_dataset.backend.engine import Generation, generate
from rollout_dataset.backend.params import RequestError, check_context, common_params, int_param, json_body
from rollout_dataset.backend.policies import PolicyRequest
from rollout_dataset.backend.reasoning_parser import ReasoningParser, ReasoningStream
from rollout_dataset.backend.reused_prompt import reused_prompt_ids
from rollout_dataset.backend.tool_parsers import ToolCallFormat
from rollout_dataset.schema.api_requests import problem_field, responses_request_problem
from rollout_dataset.tokenizers import encode_text, render_chat
from rollout_dataset.wire.responses_chat import (ENCRYPTED_REASONING_MESSAGE, encrypted_reasoning, input_to_messages,
                                                 reasoning_item, tools_to_chat)
from rollout_dataset.wire.sse import encode_json_event

__all__ = ["responses_endpoint", "LOGPROBS_INCLUDE"]

#: the `include` value that adds output-text logprobs
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def _hex(n: int) -> str:
    return secrets.token_hex(n)


def _echo_tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and tool.get("type") == "function":
            out.append({"name": tool.get("name"), "parameters": tool.get("parameters"), "strict": tool.get("strict"),
                        "type": "function", "allowed_callers": None, "async": None, "defer_loading": None,
                        "description": tool.get("description"), "output_schema": None})
    return out


def _chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice



def _usage(n_in: int, n_out: int, reasoning_tokens: int = 0) -> dict[str, Any]:
    return {"input_tokens": n_in,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0, "input_tokens_per_turn": [],
                                     "cached_tokens_per_turn": []},
            "output_tokens": n_out,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens, "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                      "tool_output_tokens_per_turn": []},
            "total_tokens": n_in + n_out}


def _logprob_entries(g: Generation, fmt: P.TokenFormatter, top_k: int, with_bytes: bool) -> list[dict[str, Any]]:
    content = P.chat_logprobs(g.steps, fmt, top_k)["content"]
    if with_bytes:
        return [{"token": c["token"], "bytes": c["bytes"], "logprob": c["logprob"], "top_logprobs": c["top_logprobs"]}
                for c in content]
    return [{"token": c["token"], "logprob": c["logprob"], "top_logprobs": c["top_logprobs"]} for c in content]


class _Answer:
    """One generated answer as Responses output items (built once, sent whole or as events).

    Args:
        g: the generation.
        tools: the serving tool-call parser (`--tool-call-parser`) that reads calls from the content;
            None: calls are not parsed (no tools, or `tool_choice` "none").
        logprobs: one logprob entry per output token (None: not asked).
        stream: the answer is streamed.
        split: the reasoning parser's `(reasoning, content)` of the whole reply, or None without one.
        thinker: the parser's per-token stream state (None without one).
    """

    def __init__(self, g: Generation, tools: ToolCallFormat | None, logprobs: list[dict[str, Any]] | None,
                 stream: bool, split: tuple[str | None, str | None] | None = None,
                 thinker: ReasoningStream | None = None) -> None:
        self.generation = g
        self.reasoning, text = split if split is not None else (None, g.text)
        text, calls = text or "", []
        if tools is not None:
            parsed = tools.parse(text)
            if parsed.tools_called:
                text = parsed.content if parsed.content and parsed.content.strip() else ""
                calls = parsed.tool_calls
        self.text = text
        self.parsed = split is not None  # as vLLM with a reasoning parser: no message item without content
        self.message_id = f"msg_{_hex(8)}"
        self.reasoning_id = f"rs_{_hex(8)}"
        # each step's text delta: the reasoning's (streamed as reasoning) and the content's
        self.reasoning_deltas: list[str] = []
        content_steps: list[tuple[int, str]] = []
        for j, step in enumerate(g.steps):
            if thinker is None:
                content_steps.append((j, step.delta))
                continue
            said, content = thinker.feed(step.token_id, step.delta)
            if said is not None and said["reasoning"]:
                self.reasoning_deltas.append(said["reasoning"])
            if content is not None:
                content_steps.append((j, content))
        # the steps whose text is the message's (all content steps without a function call)
        if calls:
            seen, n = "", 0
            while n < len(content_steps) and len(seen) < len(text):
                seen += content_steps[n][1]
                n += 1
            content_steps = content_steps[:n]
        self.text_steps = content_steps
        # as vLLM 0.32: a whole answer's message carries the logprobs of every output token, a
        # streamed one those of its text only (function-call and think-block tokens have none)
        self.logprobs = logprobs if (logprobs is None or not stream) else [logprobs[j] for j, _ in content_steps]
        if stream and self.logprobs and not calls and g.finish_reason == "stop" and g.stop_reason is None:
            self.logprobs = self.logprobs[:-1]  # a vLLM stream gives the end-of-sequence token no logprob
        # call ids of 16 hex digits, as vLLM 0.32's (tests/data/real_vllm_responses)
        self.calls = [{"arguments": c["function"]["arguments"], "call_id": f"chatcmpl-tool-{_hex(8)}",
                       "name": c["function"]["name"], "type": "function_call", "id": f"fc_{_hex(8)}",
                       "async": None, "caller": None, "namespace": None, "status": "completed"} for c in calls]

    def part(self) -> dict[str, Any]:
        return {"annotations": [], "text": self.text, "type": "output_text", "logprobs": self.logprobs}

    def message_item(self, status: str = "completed") -> dict[str, Any]:
        return {"id": self.message_id, "content": [self.part()], "role": "assistant", "status": status,
                "type": "message", "phase": None}

    @property
    def has_message(self) -> bool:
        """Returns: whether the answer has a message item (with a parser: only when it has content)."""
        return bool(self.text) or (not self.calls and not self.parsed)

    def items(self, stream: bool = False) -> list[dict[str, Any]]:
        """Args: stream: for a stream's final response (the reasoning item `completed`). Returns: the output items."""
        head = [reasoning_item(self.reasoning_id, self.reasoning, "completed" if stream else None)] if self.reasoning else []
        if self.has_message:
            head.append(self.message_item())
        return head + [dict(c) for c in self.calls]


def _top_logprobs(body: dict[str, Any]) -> int | None:
    """vLLM's echo: the request's value, else 0 when output logprobs are included, else null."""
    if body.get("top_logprobs") is not None:
        return body["top_logprobs"]
    include = body.get("include")
    return 0 if isinstance(include, list) and LOGPROBS_INCLUDE in include else None


def _response(body: dict[str, Any], model: str, rid: str, created: int, *, status: str, output: list,
              usage: dict | None, incomplete: bool, tools: list, tool_choice: Any, messages: tuple | None,
              max_tokens: int) -> dict:
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    return {
        "id": rid, "created_at": created,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"), "metadata": body.get("metadata"), "model": model,
        "object": "response", "output": output, "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": 1.0 if temperature is None else float(temperature), "tool_choice": tool_choice,
        "tools": tools, "top_p": 1.0 if top_p is None else float(top_p), "background": False,
        # vLLM echoes the effective limit (the rest of the context when unset)
        "max_output_tokens": max_tokens, "max_tool_calls": body.get("max_tool_calls"),
        "previous_response_id": None, "prompt": None, "reasoning": body.get("reasoning"), "service_tier": "auto",
        "status": status, "text": body.get("text"), "top_logprobs": _top_logprobs(body),
        "truncation": "disabled", "usage": usage, "user": body.get("user"),
        "presence_penalty": float(body.get("presence_penalty") or 0.0),
        "frequency_penalty": float(body.get("frequency_penalty") or 0.0),
        "kv_transfer_params": None, "ec_transfer_params": None,
        "input_messages": messages[0] if messages else None, "output_messages": messages[1] if messages else None,
    }


async def responses_endpoint(request: Request, state: Any, respond: Any) -> Response:
    """Serve one `/v1/responses` call.

    Args:
        request: the HTTP request.
        state: the backend's `BackendState`.
        respond: the app's policy call (`await respond(state, PolicyRequest)` -> `PolicyOutput`).

    Returns:
        The JSON response, or an event stream when `stream` is true.

    Raises:
        RequestError: a refused request: a body off the published shape
            (`rollout_dataset.schema.api_requests.responses_request_problem`, type `invalid_request_error`),
            else vLLM's message and param.
    """
    body = await json_body(request)
    problem = responses_request_problem(body)
    if problem is not None:  # the published shape: OpenAI's error type, the field as param
        raise RequestError(problem, param=problem_field(problem), type_="invalid_request_error")
    if not state.harmony and encrypted_reasoning(body):
        raise RequestError(f"{ENCRYPTED_REASONING_MESSAGE} (parameter=input)", param="input")
    if body.get("previous_response_id") is not None:
        raise RequestError("previous_response_id is not supported by the local backend (nothing is stored)",
                           param="previous_response_id")
    max_out = body.get("max_output_tokens")
    if max_out is not None:
        max_out = int_param(body, "max_output_tokens")
        if max_out > state.max_model_len:
            raise RequestError(f"max_output_tokens={max_out} cannot be greater than max_model_len="
                               f"{state.max_model_len}. Please request fewer output tokens. "
                               f"(parameter=max_output_tokens, value={max_out})", param="max_output_tokens")
    common = common_params({k: body[k] for k in ("model", "temperature", "top_p", "seed", "stream") if k in body},
                           state.served_model_name, state.max_model_len, state.return_tokens_as_token_ids)
    messages = input_to_messages(body)
    chat_tools = tools_to_chat(body.get("tools")) or None
    tool_choice = body.get("tool_choice", "auto" if chat_tools else "none")
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    req = PolicyRequest(messages=messages, tools=chat_tools, tool_choice=_chat_tool_choice(tool_choice),
                        seed=common.seed, sampling=common.sampling, turn=turn, endpoint="chat", model=common.model,
                        choice_index=0)
    tools = _echo_tools(body.get("tools"))
    rid, created = f"resp_{_hex(8)}", P.now()
    if state.harmony:  # vLLM's gpt-oss path: Harmony output parsed into reasoning, function calls and text
        from rollout_dataset.backend.harmony_responses import harmony_responses

        include = body.get("include")
        if isinstance(include, list) and LOGPROBS_INCLUDE in include:
            raise RequestError("logprobs are not supported with gpt-oss models", param="logprobs",
                               type_="invalid_request_error")

        def response(**kw: Any) -> dict:
            return _response(body, common.model, rid, created, tools=tools, tool_choice=tool_choice, **kw)

        return await harmony_responses(state, body, common, messages, chat_tools, max_out, req, respond, response,
                                       _event, lambda: _hex(8))
    reused = reused_prompt_ids(body, messages, len(state.tokenizer))
    if reused is not None:  # vLLM 0.32 (non-Harmony): generate from exactly these ids; the input drives the rest
        prompt_ids = reused
        prompt_text = state.tokenizer.decode(reused, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    else:
        try:
            prompt_text = render_chat(state.tokenizer, messages, chat_tools, True, {})
        except ValueError as exc:
            raise RequestError(str(exc), param="input") from None
        prompt_ids = encode_text(state.tokenizer, prompt_text)
    max_tokens = check_context(state.max_model_len, len(prompt_ids), max_out)
    out = await respond(state, req)
    g = generate(state.tokenizer, state.model, prompt_ids, emitted_text(out, state.tools.render), prompt_text=prompt_text,
                 max_tokens=max_tokens, stop=common.stop)
    include = body.get("include") or []
    want_logprobs = isinstance(include, list) and LOGPROBS_INCLUDE in include
    top_k = int(body.get("top_logprobs") or 0)
    fmt = P.TokenFormatter(state.tokenizer, state.model, common.as_token_ids)
    parser: ReasoningParser | None = state.reasoning
    template_kwargs = body.get("chat_template_kwargs")
    thinking = bool((template_kwargs if isinstance(template_kwargs, dict) else {}).get("enable_thinking", True))
    answer = _Answer(g, state.tools if chat_tools and tool_choice != "none" else None,
                     _logprob_entries(g, fmt, top_k, True) if want_logprobs else None, common.stream,
                     parser.split(g.text, thinking) if parser is not None else None,
                     parser.stream(prompt_ids, thinking) if parser is not None else None)
    reasoning_tokens = parser.reasoning_tokens(g.token_ids, thinking) if parser is not None else 0
    raw = None
    if body.get("enable_response_messages") is True:
        decode = state.tokenizer.decode
        raw = ([{"message": decode(prompt_ids, skip_special_tokens=False), "tokens": list(prompt_ids),
                 "type": "raw_message_tokens"}],
               [{"message": decode(g.token_ids, skip_special_tokens=False), "tokens": list(g.token_ids),
                 "type": "raw_message_tokens"}])
    incomplete = g.finish_reason == "length"
    final = _response(body, common.model, rid, created, status="incomplete" if incomplete else "completed",
                      output=answer.items(common.stream), usage=_usage(len(prompt_ids), len(g.steps), reasoning_tokens),
                      incomplete=incomplete,
                      tools=tools, tool_choice=tool_choice, messages=raw, max_tokens=max_tokens)
    if not common.stream:
        return JSONResponse(final)
    start = _response(body, common.model, rid, created, status="in_progress", output=[], usage=None,
                      incomplete=False, tools=tools, tool_choice=tool_choice, messages=None, max_tokens=max_tokens)
    stream_logprobs = _logprob_entries(g, fmt, top_k, False) if want_logprobs else None
    return StreamingResponse(_events(start, final, answer, stream_logprobs, state.token_delay), media_type="text/event-stream")


def _event(kind: str, seq: int, payload: dict[str, Any]) -> bytes:
    return encode_json_event({**payload, "sequence_number": seq, "type": kind}, kind)


async def _events(start: dict, final: dict, answer: _Answer, logprobs: list | None,
                  delay: float = 0.0) -> AsyncIterator[bytes]:
    """vLLM's Responses event sequence for one answer (text deltas per token, then function calls);
    `delay` seconds before each text delta (the backend's `token_delay`, for tests of a slow stream)."""
    seq = 0

    def ev(kind: str, payload: dict[str, Any]) -> bytes:
        nonlocal seq
        seq += 1
        return _event(kind, seq - 1, payload)

    yield ev("response.created", {"response": start})
    yield ev("response.in_progress", {"response": start})
    index = 0
    if answer.reasoning:  # vLLM: the reasoning item first, one delta per reasoning token
        where = {"item_id": answer.reasoning_id, "output_index": index}
        yield ev("response.output_item.added", {"item": reasoning_item(answer.reasoning_id, None, "in_progress"),
                                                "output_index": index})
        yield ev("response.content_part.added", {"content_index": 0, **where,
                                                 "part": {"text": "", "type": "reasoning_text"}})
        for delta in answer.reasoning_deltas:
            yield ev("response.reasoning_text.delta", {"content_index": 0, "delta": delta, **where})
        yield ev("response.reasoning_text.done", {"content_index": 0, **where, "text": answer.reasoning})
        yield ev("response.content_part.done", {"content_index": 0, **where,
                                                "part": {"text": answer.reasoning, "type": "reasoning_text"}})
        yield ev("response.output_item.done", {"item": reasoning_item(answer.reasoning_id, answer.reasoning,
                                                                      "completed"), "output_index": index})
        index += 1
    if answer.has_message:
        item_id = answer.message_id
        yield ev("response.output_item.added", {"item": {"id": item_id, "content": [], "role": "assistant",
                                                         "status": "in_progress", "type": "message", "phase": None},
                                                "output_index": index})
        yield ev("response.content_part.added", {"content_index": 0, "item_id": item_id, "output_index": index,
                                                 "part": {"annotations": [], "text": "", "type": "output_text",
                                                          "logprobs": []}})
        for j, delta in answer.text_steps:
            if not delta:
                continue
            if delay:
                await asyncio.sleep(delay)
            yield ev("response.output_text.delta", {"content_index": 0, "delta": delta, "item_id": item_id,
                                                    "logprobs": [logprobs[j]] if logprobs else [],
                                                    "output_index": index})
        yield ev("response.output_text.done", {"content_index": 0, "item_id": item_id, "logprobs": [],
                                               "output_index": index, "text": answer.text})
        yield ev("response.content_part.done", {"content_index": 0, "item_id": item_id, "output_index": index,
                                                "part": answer.part()})
        yield ev("response.output_item.done", {"item": answer.message_item(), "output_index": index})
        index += 1
    for call in answer.calls:
        yield ev("response.output_item.added", {"item": {**call, "arguments": "", "status": "in_progress"},
                                                "output_index": index})
        yield ev("response.function_call_arguments.delta", {"delta": call["arguments"], "item_id": call["id"],
                                                            "output_index": index})
        yield ev("response.function_call_arguments.done", {"arguments": call["arguments"], "item_id": call["id"],
                                                           "output_index": index, "name": call["name"]})
        yield ev("response.output_item.done", {"item": call, "output_index": index})
        index += 1
    yield ev("response.completed", {"response": final})
