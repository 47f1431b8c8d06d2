"""Reading and checking the parameters of vLLM-style requests, with vLLM's error messages.

Every check raises `RequestError`, which carries vLLM's error body (`{"error": {"message", "type",
"param", "code"}}`): `BadRequestError` for values vLLM's request checks refuse, `Bad Request` for
what its request-model validation refuses (wrong JSON, wrong types, missing fields), `NotFoundError`
for an unknown model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from rollout_dataset.backend import protocol as P
from rollout_dataset.tokenizers import template_conversation
from rollout_dataset.wire.chat_tools import template_tool

__all__ = [
    "MAX_LOGPROBS",
    "RequestError",
    "validation_error",
    "json_body",
    "int_param",
    "bool_param",
    "CommonParams",
    "common_params",
    "check_context",
    "chat_inputs",
    "chat_tools",
    "tokenize_conversation",
    "logprob_params",
    "completion_prompt",
]

MAX_LOGPROBS = 20


class RequestError(Exception):
    """A request the backend refuses, with vLLM's error body.

    Args:
        message: what is wrong (vLLM's wording where it has one).
        param: the offending parameter, or None.
        type_: the error type (`BadRequestError`, `Bad Request`, `NotFoundError`).
        code: the HTTP status.
    """

    def __init__(self, message: str, param: str | None = None, type_: str = "BadRequestError", code: int = 400):
        super().__init__(message)
        self.body = P.error_body(message, type_, param, code)
        self.code = code


def validation_error(loc: str, kind: str, msg: str, value: Any) -> RequestError:
    """A request-validation failure in vLLM's form (its pydantic errors, type "Bad Request").

    Args:
        loc: where, e.g. `body.messages`.
        kind: the pydantic error type, e.g. `list_type`.
        msg: the explanation.
        value: the offending value.

    Returns:
        The error to raise.
    """
    detail = {"type": kind, "loc": loc, "msg": msg, "input": value}
    return RequestError(f"1 validation error:\n  {detail!r}", param=loc, type_="Bad Request")


async def json_body(request: Request) -> dict:
    """The request's JSON object.

    Args:
        request: the HTTP request.

    Returns:
        The parsed body.

    Raises:
        RequestError: the body is not JSON (or nests too deep to parse) or not an object.
    """
    raw = await request.body()
    try:
        body = json.loads(raw) if raw else None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise validation_error("body", "json_invalid", f"JSON decode error: {exc}",
                               raw[:200].decode("utf-8", "replace")) from None
    except RecursionError:
        raise validation_error("body", "json_invalid", "JSON decode error: nested too deep", None) from None
    if not isinstance(body, dict):
        raise validation_error("body", "model_attributes_type", "Input should be a valid dictionary or object", body)
    return body


def int_param(body: dict, name: str, default: Any = None, minimum: int | None = None, maximum: int | None = None) -> Any:
    """An optional integer field.

    Args:
        body: the request body.
        name: the field.
        default: the value when absent or null.
        minimum: the smallest allowed value.
        maximum: the largest allowed value.

    Returns:
        The value.

    Raises:
        RequestError: not an integer, or out of range.
    """
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise validation_error(f"body.{name}", "int_type", "Input should be a valid integer", value)
    if minimum is not None and value < minimum:
        raise RequestError(f"{name} must be at least {minimum}, got {value}.", param=name)
    if maximum is not None and value > maximum:
        raise RequestError(f"{name} must be at most {maximum}, got {value}.", param=name)
    return value


def bool_param(body: dict, name: str, default: bool = False) -> bool:
    """An optional boolean field.

    Args:
        body: the request body.
        name: the field.
        default: the value when absent or null.

    Returns:
        The value.

    Raises:
        RequestError: not a boolean.
    """
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise validation_error(f"body.{name}", "bool_type", "Input should be a valid boolean", value)
    return value


@dataclass
class CommonParams:
    """The checked parameters both completion endpoints share (`sampling`: as the client sent them)."""

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


def common_params(body: dict, served_model_name: str, max_model_len: int, as_token_ids_default: bool) -> CommonParams:
    """Check the parameters both completion endpoints share, as vLLM does.

    Args:
        body: the request body.
        served_model_name: the only model name accepted (absent means that one).
        max_model_len: the context length.
        as_token_ids_default: the server-wide `return_tokens_as_token_ids`.

    Returns:
        The checked parameters.

    Raises:
        RequestError: an unknown model or a refused value (vLLM's message and param).
    """
    model = body.get("model")
    if model is not None and model != served_model_name:
        raise RequestError(
            f"The model `{model}` does not exist. Valid aliases: {served_model_name}.",
            param="model", type_="NotFoundError", code=404,
        )
    n = body.get("n", 1)
    if n is None:
        n = 1
    if isinstance(n, bool) or not isinstance(n, int):
        raise validation_error("body.n", "int_type", "Input should be a valid integer", n)
    if n < 1:
        raise RequestError(f"n must be at least 1, got {n}.")
    max_tokens = body.get("max_completion_tokens")
    name = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, name = body.get("max_tokens"), "max_tokens"
    if max_tokens is not None:
        max_tokens = int_param(body, name)
        if max_tokens < 1:
            raise RequestError(f"max_tokens must be at least 1, got {max_tokens}. "
                                f"(parameter=max_tokens, value={max_tokens})", param="max_tokens")
        if max_tokens > max_model_len:
            raise RequestError(
                f"{name}={max_tokens} cannot be greater than max_model_len={max_model_len}. "
                f"Please request fewer output tokens. (parameter={name}, value={max_tokens})",
                param=name,
            )
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise validation_error("body.stop", "list_type", "Input should be a valid string or list of strings", stop)
    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise validation_error("body.temperature", "float_type", "Input should be a valid number", temperature)
        if temperature < 0:
            raise RequestError(
                f"temperature must be non-negative, got {float(temperature)}. "
                f"(parameter=temperature, value={float(temperature)})", param="temperature",
            )
    stream = bool_param(body, "stream")
    stream_options = body.get("stream_options")
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise validation_error("body.stream_options", "model_type", "Input should be an object", stream_options)
        if not stream:
            raise RequestError("Stream options can only be defined when `stream=True`. (parameter=stream_options)",
                                param="stream_options")
    if stream and body.get("prompt_logprobs") is not None:
        raise RequestError("`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)",
                            param="prompt_logprobs")
    seed = int_param(body, "seed")
    as_ids = body.get("return_tokens_as_token_ids")
    sampling_keys = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "stop",
                     "seed", "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "logprobs",
                     "top_logprobs")
    return CommonParams(
        model=served_model_name,
        n=n,
        max_tokens=max_tokens,
        stop=stop,
        stream=stream,
        include_usage=bool(stream and stream_options and stream_options.get("include_usage")),
        seed=seed,
        return_token_ids=bool_param(body, "return_token_ids"),
        as_token_ids=as_token_ids_default if as_ids is None else bool(as_ids),
        include_stop_str=bool_param(body, "include_stop_str_in_output"),
        ignore_eos=bool_param(body, "ignore_eos"),
        sampling={k: body[k] for k in sampling_keys if k in body},
    )


def check_context(max_model_len: int, n_prompt: int, max_tokens: int | None) -> int:
    """The effective max_tokens: vLLM refuses a prompt that fills the context and otherwise clamps
    the output to what is left of it.

    Args:
        max_model_len: the context length.
        n_prompt: the prompt's token count.
        max_tokens: the requested limit, or None.

    Returns:
        The number of tokens the output may have.

    Raises:
        RequestError: the prompt alone fills the context.
    """
    limit = max_model_len
    if n_prompt >= limit:
        seen = min(n_prompt, limit + 1)
        raise RequestError(
            f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
            f"{seen} input tokens, which exceeds this limit even without any output tokens. Please reduce the "
            f"length of the input prompt. (parameter=input_tokens, value={seen})", param="input_tokens",
        )
    room = limit - n_prompt
    return room if max_tokens is None else min(max_tokens, room)



def chat_inputs(body: dict) -> tuple[list[dict], list[dict] | None, Any, dict]:
    """The chat-specific inputs: messages, tools, tool_choice, chat_template_kwargs.

    Args:
        body: the request body.

    Returns:
        `(messages, tools or None, tool_choice, chat_template_kwargs)`.

    Raises:
        RequestError: missing or malformed messages, tools or kwargs.
    """
    messages = body.get("messages")
    if messages is None:
        raise validation_error("body.messages", "missing", "Field required", body)
    if not isinstance(messages, list):
        raise validation_error("body.messages", "list_type", "Input should be a valid list", messages)
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise validation_error(f"body.messages.{i}", "model_type", "Each message needs a string 'role'", m)
    tools = chat_tools(body.get("tools"))
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise validation_error("body.chat_template_kwargs", "dict_type", "Input should be a valid dictionary", kwargs)
    return template_conversation(messages), tools or None, body.get("tool_choice"), kwargs


#: the strings pydantic's lax mode reads as a boolean (vLLM validates `strict`/`defer_loading` so)
_LAX_BOOLS = {"true": True, "t": True, "yes": True, "y": True, "on": True, "1": True,
              "false": False, "f": False, "no": False, "n": False, "off": False, "0": False}


def _optional_bool(value: Any, loc: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _LAX_BOOLS:
        return _LAX_BOOLS[value.strip().lower()]
    raise validation_error(loc, "bool_type", "Input should be a valid boolean", value)


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """A chat request's `tools` as vLLM 0.32 hands them to the chat template.

    vLLM validates each tool into its `ChatCompletionToolsParam` model and renders the model's dump:
    keys in the model's order, a missing `type` written as "function", a missing `description` or
    `parameters` written as null, `strict`/`defer_loading` only when set (read as pydantic reads a
    boolean), a tool-level `defer_loading` copied into the function and kept, other keys dropped.

    Args:
        tools: the request's `tools`.

    Returns:
        The tools as rendered, or None when absent.

    Raises:
        RequestError: a tool vLLM's request model refuses (its pydantic error, type "Bad Request").
    """
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise validation_error("body.tools", "list_type", "Input should be a valid list", tools)
    out = []
    for i, tool in enumerate(tools):
        loc = f"body.tools.{i}"
        if not isinstance(tool, dict):
            raise validation_error(loc, "model_type", "Input should be a valid dictionary or object", tool)
        if tool.get("type", "function") != "function":
            raise validation_error(f"{loc}.type", "literal_error", "Input should be 'function'", tool.get("type"))
        fn = tool.get("function")
        if not isinstance(fn, dict):
            kind, msg = ("missing", "Field required") if fn is None else ("model_type", "Input should be a valid dictionary")
            raise validation_error(f"{loc}.function", kind, msg, fn)
        if not isinstance(fn.get("name"), str):
            kind, msg = ("missing", "Field required") if "name" not in fn else ("string_type", "Input should be a valid string")
            raise validation_error(f"{loc}.function.name", kind, msg, fn.get("name"))
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise validation_error(f"{loc}.function.description", "string_type", "Input should be a valid string",
                                   fn["description"])
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
            raise validation_error(f"{loc}.function.parameters", "dict_type", "Input should be a valid dictionary",
                                   fn["parameters"])
        outer_defer = _optional_bool(tool.get("defer_loading"), f"{loc}.defer_loading")
        inner_defer = _optional_bool(fn.get("defer_loading"), f"{loc}.function.defer_loading")
        strict = _optional_bool(fn.get("strict"), f"{loc}.function.strict")
        rendered = template_tool({"defer_loading": outer_defer,
                                  "function": {**fn, "strict": strict, "defer_loading": inner_defer}})
        out.append(rendered)
    return out


def logprob_params(body: dict) -> tuple[bool, int]:
    """Chat `logprobs`/`top_logprobs`.

    Args:
        body: the request body.

    Returns:
        `(logprobs wanted, top_logprobs)`.

    Raises:
        RequestError: `top_logprobs` without `logprobs`, or above the maximum.
    """
    logprobs = bool_param(body, "logprobs")
    top = body.get("top_logprobs")
    if top is not None:
        top = int_param(body, "top_logprobs", minimum=0)
        if top > 0 and not logprobs:
            raise RequestError("when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)",
                                param="top_logprobs")
        if top > MAX_LOGPROBS:
            raise RequestError(f"Requested sample logprobs of {top}, which is greater than max allowed: "
                                f"{MAX_LOGPROBS} (parameter=logprobs, value={top})", param="logprobs")
    return logprobs, top or 0



def completion_prompt(body: dict, tokenizer: Any) -> tuple[str | None, list[int]]:
    """The prompt of `/v1/completions`: a string or token ids (a list holding one of those is accepted).

    Args:
        body: the request body.
        tokenizer: the serving tokenizer.

    Returns:
        `(prompt text or None when given as ids, prompt ids)`.

    Raises:
        RequestError: no prompt, several prompts, or ids outside the vocabulary.
    """
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return prompt, list(tokenizer.encode(prompt, add_special_tokens=True))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if any(t < 0 or t >= len(tokenizer) for t in prompt):
            raise RequestError(f"Token id out of vocabulary (0..{len(tokenizer) - 1}) in prompt.", param="prompt")
        return None, list(prompt)
    if prompt is None or prompt == "" or prompt == []:
        raise RequestError("Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
                            param="prompt")
    raise RequestError("prompt must be a string, a list of token ids, or a list holding one of those "
                        "(several prompts per request are not supported by the local backend).", param="prompt")


def tokenize_conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages vLLM 0.32's `/tokenize` renders: its chat endpoint renames an assistant message's
    `reasoning_content` to `reasoning` before rendering, `/tokenize` does not, and only `reasoning`
    reaches the template, so there a `reasoning_content` without `reasoning` is not rendered.

    Args:
        messages: the messages as `chat_inputs` returns them (not modified).

    Returns:
        The messages without such a `reasoning_content`.
    """
    return [{k: v for k, v in m.items() if k != "reasoning_content"}
            if m.get("role") == "assistant" and m.get("reasoning") is None else m for m in messages]
