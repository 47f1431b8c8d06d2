"""The local backend's HTTP app (Starlette): vLLM's OpenAI-compatible endpoints.

`create_backend_app(tokenizer="builtin", policy="echo", served_model_name="local")` serves
`/v1/models`, `/v1/chat/completions`, `/v1/completions` (streaming and not), `/tokenize`,
`/detokenize`, `/health` and `/version`, with vLLM's parameters (`return_token_ids`,
`logprobs`/`top_logprobs`, `return_tokens_as_token_ids`, `stream_options.include_usage`,
`max_tokens`/`max_completion_tokens`, `stop`, `seed`, `n`, `tools`/`tool_choice`,
`chat_template_kwargs`) and vLLM's error bodies. What to say comes from a policy; token ids,
logprobs and tool-call parsing are computed here.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rollout_dataset.backend import protocol as P
from rollout_dataset.backend.bigram import BigramModel, bigram_for_tokenizer
from rollout_dataset.backend.engine import Generation, generate
from rollout_dataset.backend.hermes import StreamingToolParser, parse_tool_calls
from rollout_dataset.backend.policies import Policy, PolicyOutput, PolicyRequest, make_policy
from rollout_dataset.backend.template import render_assistant_text
from rollout_dataset.backend.tokenizer import encode_text, load_tokenizer, render_chat

__all__ = ["create_backend_app", "BackendState", "DEFAULT_MAX_MODEL_LEN", "MAX_LOGPROBS"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_MODEL_LEN = 131072
MAX_LOGPROBS = 20


class _RequestError(Exception):
    def __init__(self, message: str, param: str | None = None, type_: str = "BadRequestError", code: int = 400):
        super().__init__(message)
        self.body = P.error_body(message, type_, param, code)
        self.code = code


def _validation_error(loc: str, kind: str, msg: str, value: Any) -> _RequestError:
    # the shape vLLM gives request-validation failures (pydantic errors, type "Bad Request")
    detail = {"type": kind, "loc": loc, "msg": msg, "input": value}
    return _RequestError(f"1 validation error:\n  {detail!r}", param=loc, type_="Bad Request")


@dataclass
class BackendState:
    """Everything the app serves with.

    Args:
        tokenizer: the serving tokenizer.
        model: the bigram logprob model.
        policy: what to say.
        served_model_name: the model name clients use.
        max_model_len: the context length.
        token_delay: seconds to wait between stream chunks (0: none).
        return_tokens_as_token_ids: the server-wide default of `return_tokens_as_token_ids`.
        tokenizer_spec: how the tokenizer was named (for `/v1/models` root).
    """

    tokenizer: Any
    model: BigramModel
    policy: Policy
    served_model_name: str
    max_model_len: int
    token_delay: float
    return_tokens_as_token_ids: bool
    tokenizer_spec: str

    @property
    def fingerprint(self) -> str:
        """Returns: `vllm-<version>-<8 hex>`, stable for one tokenizer."""
        vocab_hash = hashlib.sha256(str(len(self.tokenizer)).encode() + self.tokenizer_spec.encode()).hexdigest()[:8]
        return f"vllm-{P.EMULATED_VLLM_VERSION}-{vocab_hash}"


# --------------------------------------------------------------------------------------------
# request parsing


async def _json_body(request: Request) -> dict:
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _validation_error("body", "json_invalid", f"JSON decode error: {exc}", raw[:200].decode("utf-8", "replace"))
    if not isinstance(body, dict):
        raise _validation_error("body", "model_attributes_type", "Input should be a valid dictionary or object", body)
    return body


def _int_param(body: dict, name: str, default: Any = None, minimum: int | None = None, maximum: int | None = None) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _validation_error(f"body.{name}", "int_type", "Input should be a valid integer", value)
    if minimum is not None and value < minimum:
        raise _RequestError(f"{name} must be at least {minimum}, got {value}.", param=name)
    if maximum is not None and value > maximum:
        raise _RequestError(f"{name} must be at most {maximum}, got {value}.", param=name)
    return value


def _bool_param(body: dict, name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _validation_error(f"body.{name}", "bool_type", "Input should be a valid boolean", value)
    return value


@dataclass
class _Common:
    model: str
    n: int
    max_tokens: int | None
    stop: list[str]
    stream: bool
    include_usage: bool
    seed: int | None
    return_token_ids: bool
    as_token_ids: bool
    include_stop_str: bool
    ignore_eos: bool
    sampling: dict


def _common_params(body: dict, state: BackendState) -> _Common:
    model = body.get("model")
    if model is not None and model != state.served_model_name:
        raise _RequestError(
            f"The model `{model}` does not exist. Valid aliases: {state.served_model_name}.",
            param="model", type_="NotFoundError", code=404,
        )
    n = body.get("n", 1)
    if n is None:
        n = 1
    if isinstance(n, bool) or not isinstance(n, int):
        raise _validation_error("body.n", "int_type", "Input should be a valid integer", n)
    if n < 1:
        raise _RequestError(f"n must be at least 1, got {n}.")
    max_tokens = body.get("max_completion_tokens")
    name = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, name = body.get("max_tokens"), "max_tokens"
    if max_tokens is not None:
        max_tokens = _int_param(body, name)
        if max_tokens < 1:
            raise _RequestError(f"max_tokens must be at least 1, got {max_tokens}.", param=name)
        if max_tokens > state.max_model_len:
            raise _RequestError(
                f"{name}={max_tokens} cannot be greater than max_model_len={state.max_model_len}. "
                f"Please request fewer output tokens. (parameter={name}, value={max_tokens})",
                param=name,
            )
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise _validation_error("body.stop", "list_type", "Input should be a valid string or list of strings", stop)
    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise _validation_error("body.temperature", "float_type", "Input should be a valid number", temperature)
        if temperature < 0:
            raise _RequestError(
                f"temperature must be non-negative, got {float(temperature)}. "
                f"(parameter=temperature, value={float(temperature)})", param="temperature",
            )
    stream = _bool_param(body, "stream")
    stream_options = body.get("stream_options")
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise _validation_error("body.stream_options", "model_type", "Input should be an object", stream_options)
        if not stream:
            raise _RequestError("Stream options can only be defined when `stream=True`.", param="stream_options")
    if stream and body.get("prompt_logprobs") is not None:
        raise _RequestError("`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)",
                            param="prompt_logprobs")
    seed = _int_param(body, "seed")
    as_ids = body.get("return_tokens_as_token_ids")
    sampling_keys = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "stop",
                     "seed", "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "logprobs",
                     "top_logprobs")
    return _Common(
        model=state.served_model_name,
        n=n,
        max_tokens=max_tokens,
        stop=stop,
        stream=stream,
        include_usage=bool(stream and stream_options and stream_options.get("include_usage")),
        seed=seed,
        return_token_ids=_bool_param(body, "return_token_ids"),
        as_token_ids=state.return_tokens_as_token_ids if as_ids is None else bool(as_ids),
        include_stop_str=_bool_param(body, "include_stop_str_in_output"),
        ignore_eos=_bool_param(body, "ignore_eos"),
        sampling={k: body[k] for k in sampling_keys if k in body},
    )


def _check_context(state: BackendState, n_prompt: int, max_tokens: int | None) -> int:
    if n_prompt >= state.max_model_len or (max_tokens is not None and n_prompt + max_tokens > state.max_model_len):
        raise _RequestError(
            f"This model's maximum context length is {state.max_model_len} tokens. However, your request has "
            f"{n_prompt} input tokens and requested {max_tokens or 0} output tokens. Please reduce the length of "
            "the input or the requested output.", param="input_tokens",
        )
    return max_tokens if max_tokens is not None else state.max_model_len - n_prompt


async def _respond(state: BackendState, req: PolicyRequest) -> PolicyOutput:
    if getattr(state.policy, "run_in_thread", True):
        out = await asyncio.to_thread(state.policy.respond, req)
    else:  # cheap policies answer inline (no thread hop)
        out = state.policy.respond(req)
    if isinstance(out, str):
        return PolicyOutput(text=out)
    if not isinstance(out, PolicyOutput):
        raise TypeError(f"policy {type(state.policy).__name__} returned {type(out).__name__}, not PolicyOutput")
    return out


def _emitted_text(out: PolicyOutput) -> str:
    return render_assistant_text(out.text, [c.as_dict() for c in out.tool_calls])


# --------------------------------------------------------------------------------------------
# endpoints


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def _error_response(exc: _RequestError) -> JSONResponse:
    return JSONResponse(exc.body, status_code=exc.code)


def _handler(fn: Callable) -> Callable:
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request, request.app.state.backend)
        except _RequestError as exc:
            return _error_response(exc)

    endpoint.__name__ = fn.__name__
    return endpoint


async def _models(request: Request, state: BackendState) -> Response:
    created = P.now()
    card = {
        "id": state.served_model_name,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": state.tokenizer_spec,
        "parent": None,
        "max_model_len": state.max_model_len,
        "permission": [
            {
                "id": f"modelperm-{hashlib.sha256(str(created).encode()).hexdigest()[:16]}",
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
    return JSONResponse({"object": "list", "data": [card]})


def _chat_inputs(body: dict) -> tuple[list[dict], list[dict] | None, Any, dict]:
    messages = body.get("messages")
    if messages is None:
        raise _validation_error("body.messages", "missing", "Field required", body)
    if not isinstance(messages, list):
        raise _validation_error("body.messages", "list_type", "Input should be a valid list", messages)
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _validation_error(f"body.messages.{i}", "model_type", "Each message needs a string 'role'", m)
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise _validation_error("body.tools", "list_type", "Input should be a valid list of tool objects", tools)
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise _validation_error("body.chat_template_kwargs", "dict_type", "Input should be a valid dictionary", kwargs)
    return messages, tools or None, body.get("tool_choice"), kwargs


def _logprob_params(body: dict) -> tuple[bool, int]:
    logprobs = _bool_param(body, "logprobs")
    top = body.get("top_logprobs")
    if top is not None:
        top = _int_param(body, "top_logprobs", minimum=0)
        if top > 0 and not logprobs:
            raise _RequestError("when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)",
                                param="top_logprobs")
        if top > MAX_LOGPROBS:
            raise _RequestError(f"Requested sample logprobs of {top}, which is greater than max allowed: "
                                f"{MAX_LOGPROBS}", param="top_logprobs")
    return logprobs, top or 0


async def _chat(request: Request, state: BackendState) -> Response:
    body = await _json_body(request)
    messages, tools, tool_choice, template_kwargs = _chat_inputs(body)
    common = _common_params(body, state)
    want_logprobs, top_k = _logprob_params(body)
    try:
        prompt_text = render_chat(state.tokenizer, messages, tools, True, template_kwargs)
    except ValueError as exc:
        raise _RequestError(str(exc), param="messages")
    prompt_ids = encode_text(state.tokenizer, prompt_text)
    max_tokens = _check_context(state, len(prompt_ids), common.max_tokens)
    parse_tools = bool(tools) and tool_choice != "none"
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    gens: list[Generation] = []
    for i in range(common.n):
        req = PolicyRequest(messages=messages, tools=tools, tool_choice=tool_choice, seed=common.seed,
                            sampling=common.sampling, turn=turn, endpoint="chat", model=common.model, choice_index=i)
        out = await _respond(state, req)
        gens.append(generate(state.tokenizer, state.model, prompt_ids, _emitted_text(out), prompt_text=prompt_text,
                             max_tokens=max_tokens, stop=common.stop,
                             include_stop_str_in_output=common.include_stop_str, ignore_eos=common.ignore_eos))
    fmt = P.TokenFormatter(state.tokenizer, state.model, common.as_token_ids)
    rid, created = P.chat_completion_id(), P.now()
    n_out = sum(len(g.steps) for g in gens)
    if common.stream:
        stream = _chat_stream(state, common, gens, fmt, rid, created, prompt_ids, parse_tools, want_logprobs, top_k)
        return StreamingResponse(stream, media_type="text/event-stream")
    choices = []
    for i, g in enumerate(gens):
        content, calls, finish = g.text, [], g.finish_reason
        if parse_tools:
            parsed = parse_tool_calls(g.text)
            if parsed.tools_called:
                content, calls, finish = parsed.content, parsed.tool_calls, "tool_calls"
        logprobs = P.chat_logprobs(g.steps, fmt, top_k) if want_logprobs else None
        choices.append(P.chat_choice(i, content, calls, logprobs, finish, g.stop_reason,
                                     g.token_ids if common.return_token_ids else None))
    resp = P.chat_response(rid, created, common.model, choices, P.usage_dict(len(prompt_ids), n_out),
                           state.fingerprint, prompt_ids if common.return_token_ids else None)
    return JSONResponse(resp)


async def _chat_stream(state, common: _Common, gens, fmt, rid, created, prompt_ids, parse_tools, want_logprobs,
                       top_k) -> AsyncIterator[str]:
    model = common.model
    for i, g in enumerate(gens):
        role_choice = {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                       "finish_reason": None}
        yield _sse(P.chat_chunk(rid, created, model, role_choice,
                                prompt_token_ids=list(prompt_ids) if common.return_token_ids else None,
                                prompt_text=None))
        parser = StreamingToolParser() if parse_tools else None
        tools_streamed = False
        text = ""
        for j, step in enumerate(g.steps):
            if state.token_delay:
                await asyncio.sleep(state.token_delay)
            last = j == len(g.steps) - 1
            text += step.delta
            if parser is not None:
                delta = parser.update(text) if step.delta else None
                if delta and "tool_calls" in delta:
                    tools_streamed = True
            else:
                delta = {"content": step.delta} if step.delta else None
            logprobs = P.chat_logprobs([step], fmt, top_k) if want_logprobs else None
            if delta is None:
                if not last and logprobs is None and not common.return_token_ids:
                    continue
                delta = {}
            choice: dict[str, Any] = {"index": i, "delta": delta, "logprobs": logprobs}
            extra: dict[str, Any] = {}
            if not last:
                choice["finish_reason"] = None
            else:
                finish = g.finish_reason
                if tools_streamed and finish == "stop":
                    finish = "tool_calls"
                choice["finish_reason"] = finish
                choice["stop_reason"] = g.stop_reason
                if not common.include_usage:
                    extra["system_fingerprint"] = state.fingerprint
            choice["token_ids"] = [step.token_id] if common.return_token_ids else None
            yield _sse(P.chat_chunk(rid, created, model, choice, **extra))
    if common.include_usage:
        n_out = sum(len(g.steps) for g in gens)
        yield _sse(P.usage_chunk(rid, created, model, "chat.completion.chunk",
                                 P.usage_dict(len(prompt_ids), n_out, full=False), state.fingerprint))
    yield "data: [DONE]\n\n"


def _completion_prompt(body: dict, tokenizer) -> tuple[str | None, list[int]]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return prompt, list(tokenizer.encode(prompt, add_special_tokens=True))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if any(t < 0 or t >= len(tokenizer) for t in prompt):
            raise _RequestError(f"Token id out of vocabulary (0..{len(tokenizer) - 1}) in prompt.", param="prompt")
        return None, list(prompt)
    if prompt is None or prompt == "" or prompt == []:
        raise _RequestError("Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
                            param="prompt")
    raise _RequestError("prompt must be a string, a list of token ids, or a list holding one of those "
                        "(several prompts per request are not supported by the local backend).", param="prompt")


async def _completions(request: Request, state: BackendState) -> Response:
    body = await _json_body(request)
    common = _common_params(body, state)
    k = body.get("logprobs")
    if k is not None:
        k = _int_param(body, "logprobs", minimum=0)
        if k > MAX_LOGPROBS:
            raise _RequestError(f"Requested sample logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS}",
                                param="logprobs")
    prompt_text, prompt_ids = _completion_prompt(body, state.tokenizer)
    max_tokens = _check_context(state, len(prompt_ids), common.max_tokens if common.max_tokens else 16)
    if prompt_text is None:
        prompt_text_for_policy = state.tokenizer.decode(prompt_ids, skip_special_tokens=False)
    else:
        prompt_text_for_policy = prompt_text
    gens = []
    for i in range(common.n):
        req = PolicyRequest(messages=[{"role": "user", "content": prompt_text_for_policy}], seed=common.seed,
                            sampling=common.sampling, turn=0, endpoint="completions", model=common.model,
                            choice_index=i)
        out = await _respond(state, req)
        gens.append(generate(state.tokenizer, state.model, prompt_ids, _emitted_text(out), prompt_text=prompt_text,
                             max_tokens=max_tokens, stop=common.stop,
                             include_stop_str_in_output=common.include_stop_str, ignore_eos=common.ignore_eos))
    fmt = P.TokenFormatter(state.tokenizer, state.model, common.as_token_ids)
    rid, created = P.completion_id(), P.now()
    if common.stream:
        return StreamingResponse(_completion_stream(state, common, gens, fmt, rid, created, prompt_ids, k),
                                 media_type="text/event-stream")
    choices = []
    for i, g in enumerate(gens):
        logprobs = P.completion_logprobs(g.steps, fmt, k) if k is not None else None
        choices.append(P.completion_choice(i, g.text, logprobs, g.finish_reason, g.stop_reason,
                                           g.token_ids if common.return_token_ids else None,
                                           list(prompt_ids) if common.return_token_ids else None))
    n_out = sum(len(g.steps) for g in gens)
    return JSONResponse(P.completion_response(rid, created, common.model, choices,
                                              P.usage_dict(len(prompt_ids), n_out), state.fingerprint))


async def _completion_stream(state, common: _Common, gens, fmt, rid, created, prompt_ids, k) -> AsyncIterator[str]:
    model = common.model
    for i, g in enumerate(gens):
        offset = 0
        for j, step in enumerate(g.steps):
            if state.token_delay:
                await asyncio.sleep(state.token_delay)
            last = j == len(g.steps) - 1
            logprobs = None
            if k is not None:
                logprobs = P.completion_logprobs([step], fmt, k, initial_offset=offset)
                offset += len(fmt.token(step.token_id))
            choice = {
                "index": i,
                "text": step.delta,
                "logprobs": logprobs,
                "finish_reason": g.finish_reason if last else None,
                "stop_reason": g.stop_reason if last else None,
                "prompt_token_ids": list(prompt_ids) if (j == 0 and common.return_token_ids) else None,
                "token_ids": [step.token_id] if common.return_token_ids else None,
            }
            extra = {"system_fingerprint": state.fingerprint} if (last and not common.include_usage) else {}
            yield _sse(P.completion_chunk(rid, created, model, choice, **extra))
    if common.include_usage:
        n_out = sum(len(g.steps) for g in gens)
        yield _sse(P.usage_chunk(rid, created, model, "text_completion",
                                 P.usage_dict(len(prompt_ids), n_out, full=False), state.fingerprint))
    yield "data: [DONE]\n\n"


async def _tokenize(request: Request, state: BackendState) -> Response:
    body = await _json_body(request)
    tok = state.tokenizer
    if "messages" in body:
        messages, tools, _, kwargs = _chat_inputs(body)
        try:
            text = render_chat(tok, messages, tools, _bool_param(body, "add_generation_prompt", True), kwargs)
        except ValueError as exc:
            raise _RequestError(str(exc), param="messages")
        ids = list(tok.encode(text, add_special_tokens=_bool_param(body, "add_special_tokens", False)))
    elif isinstance(body.get("prompt"), str):
        ids = list(tok.encode(body["prompt"], add_special_tokens=_bool_param(body, "add_special_tokens", True)))
    else:
        raise _validation_error("body.prompt", "missing", "Field required (prompt or messages)", body)
    strs = tok.convert_ids_to_tokens(ids) if _bool_param(body, "return_token_strs") else None
    return JSONResponse({"count": len(ids), "max_model_len": state.max_model_len, "tokens": ids, "token_strs": strs})


async def _detokenize(request: Request, state: BackendState) -> Response:
    body = await _json_body(request)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise _validation_error("body.tokens", "list_type", "Input should be a valid list of integers", tokens)
    bad = [t for t in tokens if t < 0 or t >= len(state.tokenizer)]
    if bad:
        raise _RequestError(f"Token id {bad[0]} is out of vocabulary (0..{len(state.tokenizer) - 1}).",
                            param="tokens")
    text = state.tokenizer.decode(tokens, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return JSONResponse({"prompt": text})


async def _health(request: Request) -> Response:
    return Response(status_code=200)


async def _version(request: Request) -> Response:
    return JSONResponse({"version": P.EMULATED_VLLM_VERSION})


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def _server_error(request: Request, exc: Exception) -> Response:
    logger.exception("local backend failed on %s", request.url.path)
    return JSONResponse(P.error_body(f"{type(exc).__name__}: {exc}", "InternalServerError", None, 500),
                        status_code=500)


def create_backend_app(
    tokenizer: Any = "builtin",
    policy: Policy | str = "echo",
    served_model_name: str = "local",
    *,
    script: Any = None,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    token_delay: float = 0.0,
    return_tokens_as_token_ids: bool = False,
    policy_kwargs: dict | None = None,
) -> Starlette:
    """Build the local backend's ASGI app.

    Args:
        tokenizer: `"builtin"`, a tokenizer folder, a Hub id, or a loaded transformers tokenizer.
        policy: a policy object or a registered policy name (`echo`, `script`, `oracle`, ...).
        served_model_name: the model name clients must use (or omit).
        script: the script file or steps for `policy="script"`.
        max_model_len: the context length (prompt + output tokens).
        token_delay: seconds between stream chunks (for tests that need a slow stream).
        return_tokens_as_token_ids: server-wide default for `return_tokens_as_token_ids`
            (vLLM's `--return-tokens-as-token-ids`).
        policy_kwargs: extra keyword arguments for `make_policy`.

    Returns:
        The Starlette app (its `state.backend` is the `BackendState`).

    Raises:
        ValueError: unknown policy name or bad script.
        FileNotFoundError: tokenizer or script file missing.
    """
    spec = tokenizer if isinstance(tokenizer, str) else getattr(tokenizer, "name_or_path", "custom")
    tok = load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    if isinstance(policy, str):
        kwargs = dict(policy_kwargs or {})
        if script is not None:
            kwargs["script"] = script
        policy_obj = make_policy(policy, **kwargs)
    else:
        policy_obj = policy
    state = BackendState(
        tokenizer=tok,
        model=bigram_for_tokenizer(tok),
        policy=policy_obj,
        served_model_name=served_model_name,
        max_model_len=max_model_len,
        token_delay=token_delay,
        return_tokens_as_token_ids=return_tokens_as_token_ids,
        tokenizer_spec=str(spec),
    )
    routes = [
        Route("/v1/models", _handler(_models), methods=["GET"]),
        Route("/v1/chat/completions", _handler(_chat), methods=["POST"]),
        Route("/v1/completions", _handler(_completions), methods=["POST"]),
        Route("/tokenize", _handler(_tokenize), methods=["POST"]),
        Route("/detokenize", _handler(_detokenize), methods=["POST"]),
        Route("/health", _health, methods=["GET"]),
        Route("/version", _version, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _server_error})
    app.state.backend = state
    return app
