"""The local backend's HTTP app (Starlette): vLLM's OpenAI-compatible endpoints.

`create_backend_app(tokenizer="builtin", policy="echo", served_model_name="local")` serves
`/v1/models`, `/v1/chat/completions`, `/v1/completions` (streaming and not), `/v1/responses`
(`rollout_dataset.backend.responses_endpoint`), `/tokenize`,
`/detokenize`, `/health` and `/version`, with vLLM's parameters (`return_token_ids`,
`logprobs`/`top_logprobs`, `return_tokens_as_token_ids`, `stream_options.include_usage`,
`max_tokens`/`max_completion_tokens`, `stop`, `seed`, `n`, `tools`/`tool_choice`,
`chat_template_kwargs`, `kv_transfer_params.prompt_token_ids`) and vLLM's error bodies. What to say comes from a policy; token ids,
logprobs and tool-call parsing are computed here.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rollout_dataset.backend import protocol as P
from rollout_dataset.backend.bigram import BigramModel, bigram_for_tokenizer
from rollout_dataset.backend.chat_stream import chat_stream
from rollout_dataset.backend.engine import Generation, TokenStep
from rollout_dataset.harmony import HARMONY_TOKENIZER, HarmonyTokenizer, load_harmony_tokenizer
from rollout_dataset.backend.harmony_reply import HARMONY_REASONING_PARSER
from rollout_dataset.backend.params import (
    CommonParams,
    RequestError,
    bool_param,
    chat_inputs,
    tokenize_conversation,
    check_context,
    common_params,
    completion_prompt,
    MAX_LOGPROBS,
    int_param,
    json_body,
    logprob_params,
    validation_error,
)
from rollout_dataset.backend.policies import Policy, PolicyOutput, PolicyRequest, make_policy
from rollout_dataset.backend.prompt_logprobs import prompt_logprobs, prompt_logprobs_param
from rollout_dataset.backend.reasoning_parser import ReasoningParser, make_reasoning_parser
from rollout_dataset.backend.reused_prompt import reused_prompt_ids
from rollout_dataset.backend.tool_parsers import ToolCallFormat, make_tool_call_format
from rollout_dataset.backend.emitted import generate_choices, scrub_surrogates as _scrub
from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR, encode_text, load_tokenizer, render_chat
from rollout_dataset.wire.sse import DONE, encode_event, encode_json_event

__all__ = ["create_backend_app", "BackendState", "DEFAULT_MAX_MODEL_LEN", "MAX_LOGPROBS"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_MODEL_LEN = 131072


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
        policy_name: the policy's name (`/version` reports it: every answer is scripted).
        reasoning: vLLM's `--reasoning-parser` (`qwen3`, `deepseek_r1`) bound to the tokenizer, or None.
        harmony_reasoning: `--reasoning-parser openai_gptoss` on a Harmony tokenizer (the analysis
            channel is surfaced as `reasoning`).
        tools: vLLM's `--tool-call-parser` (`hermes`, `deepseek_v3`) bound to the tokenizer.
    """

    tokenizer: Any
    model: BigramModel
    policy: Policy
    served_model_name: str
    max_model_len: int
    token_delay: float
    return_tokens_as_token_ids: bool
    tokenizer_spec: str
    policy_name: str = "custom"
    reasoning: ReasoningParser | None = None
    harmony_reasoning: bool = False
    tools: ToolCallFormat = ToolCallFormat()

    @property
    def harmony(self) -> bool:
        """Returns: the tokenizer is gpt-oss Harmony (chat prompts rendered by `openai_harmony`)."""
        return isinstance(self.tokenizer, HarmonyTokenizer)

    @property
    def fingerprint(self) -> str:
        """Returns: `rollout-dataset-local-backend-<version>-<policy>-<8 hex>`, stable for one tokenizer
        and policy; never a vLLM fingerprint."""
        from rollout_dataset._version import __version__

        vocab_hash = hashlib.sha256(str(len(self.tokenizer)).encode() + self.tokenizer_spec.encode()).hexdigest()[:8]
        return f"{P.LOCAL_BACKEND_KIND}-{__version__}-{self.policy_name}-{vocab_hash}"


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


async def _json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object, with lone surrogates replaced (see `_scrub`).

    Raises:
        RequestError: the body is not a JSON object, or nests too deep to parse.
    """
    try:
        body = await json_body(request)
    except RecursionError:
        raise validation_error("body", "json_invalid", "JSON decode error: nested too deep", None) from None
    raw = await request.body()  # cached by Starlette
    if b"\\ud" in raw or b"\\uD" in raw or b"\xed" in raw:
        body = _scrub(body)
    return body


# --------------------------------------------------------------------------------------------
# endpoints


def _sse(obj: Any) -> bytes:
    return encode_json_event(obj)


def _error_response(exc: RequestError) -> JSONResponse:
    return JSONResponse(exc.body, status_code=exc.code)


#: request header that delays one answer (milliseconds, at most `MAX_ANSWER_DELAY_MS`): a test knob
#: so calls sent at once finish out of order, as they do on a real server. vLLM has no such header.
ANSWER_DELAY_HEADER = "x-backend-delay-ms"
MAX_ANSWER_DELAY_MS = 10_000


def _answer_delay_s(request: Request) -> float:
    """Seconds to wait before answering, from `ANSWER_DELAY_HEADER` (0 when absent).

    Raises:
        RequestError: the header is not an integer from 0 to `MAX_ANSWER_DELAY_MS`.
    """
    raw = request.headers.get(ANSWER_DELAY_HEADER)
    if raw is None:
        return 0.0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_ANSWER_DELAY_MS:
        raise RequestError(f"header {ANSWER_DELAY_HEADER} must be an integer from 0 to {MAX_ANSWER_DELAY_MS}, "
                           f"not {raw[:40]!r}", param=ANSWER_DELAY_HEADER)
    return value / 1000.0


def _handler(fn: Callable[[Request, Any], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            delay = _answer_delay_s(request)
            if delay:
                await asyncio.sleep(delay)
            return await fn(request, request.app.state.backend)
        except RequestError as exc:
            return _error_response(exc)

    endpoint.__name__ = fn.__name__
    return endpoint


async def _models(request: Request, state: BackendState) -> Response:
    created = P.now()
    card = {
        "id": state.served_model_name,
        "object": "model",
        "created": created,
        "owned_by": P.LOCAL_BACKEND_KIND,
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


async def _chat(request: Request, state: BackendState) -> Response:
    body = await _json_body(request)
    if state.harmony:
        from rollout_dataset.backend.harmony_endpoint import harmony_chat

        return await harmony_chat(state, body, _respond)
    messages, tools, tool_choice, template_kwargs = chat_inputs(body)
    common = common_params(body, state.served_model_name, state.max_model_len, state.return_tokens_as_token_ids)
    want_logprobs, top_k = logprob_params(body)
    reused = reused_prompt_ids(body, messages, len(state.tokenizer))
    if reused is not None:  # vLLM 0.32: generate from exactly these ids; messages still drive the rest
        prompt_ids = reused
        prompt_text = state.tokenizer.decode(reused, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    else:
        try:
            prompt_text = render_chat(state.tokenizer, messages, tools, True, template_kwargs)
        except ValueError as exc:
            raise RequestError(str(exc), param="messages") from None
        prompt_ids = encode_text(state.tokenizer, prompt_text)
    max_tokens = check_context(state.max_model_len, len(prompt_ids), common.max_tokens)
    parse_tools = bool(tools) and tool_choice != "none"
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    req = PolicyRequest(messages=messages, tools=tools, tool_choice=tool_choice, seed=common.seed,
                        sampling=common.sampling, turn=turn, endpoint="chat", model=common.model)
    gens = await generate_choices(state, _respond, req, common, prompt_ids, max_tokens, prompt_text=prompt_text)
    fmt = P.TokenFormatter(state.tokenizer, state.model, common.as_token_ids)
    rid, created = P.chat_completion_id(), P.now()
    n_out = sum(len(g.steps) for g in gens)
    thinking = bool((template_kwargs or {}).get("enable_thinking", True))  # vLLM: qwen3 reads this
    reasoning_tokens = (sum(state.reasoning.reasoning_tokens(g.token_ids, thinking) for g in gens)
                        if state.reasoning is not None else None)
    # vLLM 0.32: `include_reasoning: false` under a reasoning parser hides the reasoning and, with it,
    # every choice's `token_ids` and logprobs (they would show the reasoning's tokens)
    hide = state.reasoning is not None and not bool_param(body, "include_reasoning", True)
    if hide:
        want_logprobs = False
    if common.stream:
        stream = chat_stream(state, common, gens, fmt, rid, created, prompt_ids, want_logprobs, top_k, tool_choice, hide,
                             lambda _: _ChatDeltas(state, prompt_ids, parse_tools, thinking, hide),
                             lambda: reasoning_tokens)
        return StreamingResponse(stream, media_type="text/event-stream")
    choices = []
    for i, g in enumerate(gens):
        reasoning, text = state.reasoning.split(g.text, thinking) if state.reasoning is not None else (None, g.text)
        if parse_tools and text is not None:
            content, calls, finish = _message_parts(text, g.finish_reason, tool_choice, state.tools)
        else:
            content, calls, finish = text, [], g.finish_reason
        logprobs = P.chat_logprobs(g.steps, fmt, top_k) if want_logprobs else None
        choices.append(P.chat_choice(i, content, calls, logprobs, finish, g.stop_reason,
                                     g.token_ids if common.return_token_ids and not hide else None,
                                     None if hide else reasoning))
    resp = P.chat_response(rid, created, common.model, choices,
                           P.usage_dict(len(prompt_ids), n_out, reasoning_tokens=reasoning_tokens),
                           state.fingerprint, prompt_ids if common.return_token_ids else None)
    return JSONResponse(resp)


def _message_parts(text: str, engine_finish: str, tool_choice: Any,
                   tools: ToolCallFormat) -> tuple[str | None, list[dict[str, Any]], str]:
    """Content, tool calls and finish reason of a choice, as vLLM 0.32 with the tool parser gives
    them: `auto` drops whitespace-only content and finishes with `tool_calls` when a call was parsed;
    `required` and a named function (hermes: parsed the same way, being a strict structural-tag parser;
    deepseek_v3: read as `auto`) give content "" when there is none, and a named function finishes with
    the engine's own reason. `text` is the reply after a reasoning parser took its reasoning out."""
    parsed = tools.parse(text)
    if tool_choice in (None, "auto") or tools.content_never_null_when_forced:
        if not parsed.tools_called:
            content: str | None = text
            if tool_choice not in (None, "auto") and not text.strip():
                content = None
            calls: list[dict[str, Any]] = []
        else:  # deepseek_v3: markup with no complete call answers the content before it, no calls
            content = parsed.content if parsed.content and parsed.content.strip() else None
            calls = parsed.tool_calls
        if tool_choice in (None, "auto"):
            return content, calls, "tool_calls" if calls else engine_finish
        finish = "tool_calls" if tool_choice == "required" and engine_finish == "stop" else engine_finish
        return content or "", calls, finish
    content = parsed.content if parsed.tools_called else text
    if not parsed.tools_called and not (content or "").strip():
        content = None
    finish = engine_finish
    if tool_choice == "required" and parsed.tools_called and finish == "stop":
        finish = "tool_calls"
    return content or "", parsed.tool_calls, finish


class _ChatDeltas:
    """A chat choice's tokens as deltas: the reasoning parser's first (what follows `</think>` takes the
    usual path), then the tool parser's, else the token's text as content."""

    def __init__(self, state: BackendState, prompt_ids: Sequence[int], parse_tools: bool, thinking: bool,
                 hide_reasoning: bool) -> None:
        self.parser = state.tools.stream() if parse_tools else None
        self.reads_end_of_reasoning = state.tools.reads_end_of_reasoning
        self.thinker = state.reasoning.stream(prompt_ids, thinking) if state.reasoning is not None else None
        self.hide_reasoning = hide_reasoning

    @property
    def tools_streamed(self) -> bool:
        """Returns: a delta so far held tool calls."""
        return self.parser is not None and self.parser.tools_streamed

    def delta(self, step: TokenStep, last: bool) -> dict[str, Any] | None:
        piece: str | None = step.delta
        ids = [step.token_id]
        delta: dict[str, Any] | None = None
        if self.thinker is not None:
            was_over = self.thinker.ended
            delta, piece = self.thinker.feed(step.token_id, step.delta)
            if self.hide_reasoning:
                delta = None
            if piece is None and not was_over and self.thinker.ended and self.parser is not None \
                    and self.reads_end_of_reasoning:
                piece, ids = "", []  # vLLM hands the tool parser the `</think>` token's (empty) content
        if piece is None:
            pass
        elif self.parser is not None:
            delta = self.parser.feed(piece, ids)
        else:
            delta = {"content": piece} if piece else None
        return delta


async def _completions(request: Request, state: BackendState) -> Response:
    body = await _json_body(request)
    common = common_params(body, state.served_model_name, state.max_model_len, state.return_tokens_as_token_ids)
    k = body.get("logprobs")
    if k is not None:
        k = int_param(body, "logprobs", minimum=0)
        if k > MAX_LOGPROBS:
            raise RequestError(f"Requested sample logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS} "
                                f"(parameter=logprobs, value={k})", param="logprobs")
    prompt_text, prompt_ids = completion_prompt(body, state.tokenizer)
    n_prompt_logprobs = prompt_logprobs_param(body)
    max_tokens = check_context(state.max_model_len, len(prompt_ids), common.max_tokens if common.max_tokens else 16)
    if prompt_text is None:
        prompt_text_for_policy = state.tokenizer.decode(prompt_ids, skip_special_tokens=False)
    else:
        prompt_text_for_policy = prompt_text
    req = PolicyRequest(messages=[{"role": "user", "content": prompt_text_for_policy}], seed=common.seed,
                        sampling=common.sampling, turn=0, endpoint="completions", model=common.model)
    gens = await generate_choices(state, _respond, req, common, prompt_ids, max_tokens, prompt_text=prompt_text)
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
        if n_prompt_logprobs is not None:
            choices[-1]["prompt_logprobs"] = prompt_logprobs(state.model, state.tokenizer, prompt_ids,
                                                             n_prompt_logprobs)
    n_out = sum(len(g.steps) for g in gens)
    return JSONResponse(P.completion_response(rid, created, common.model, choices,
                                              P.usage_dict(len(prompt_ids), n_out), state.fingerprint))


async def _completion_stream(state: BackendState, common: CommonParams, gens: list[Generation], fmt: P.TokenFormatter,
                             rid: str, created: int, prompt_ids: Sequence[int], k: int | None) -> AsyncIterator[bytes]:
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
                offset += len(fmt.token(step.token_id, step.held))
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
    yield encode_event(DONE)


async def _responses(request: Request, state: BackendState) -> Response:
    from rollout_dataset.backend.responses_endpoint import responses_endpoint

    return await responses_endpoint(request, state, _respond)


async def _messages(request: Request, state: BackendState) -> Response:
    from rollout_dataset.backend.messages_endpoint import messages_endpoint

    return await messages_endpoint(request, state, _chat)


async def _messages_count_tokens(request: Request, state: BackendState) -> Response:
    from rollout_dataset.backend.messages_endpoint import count_tokens_endpoint

    return await count_tokens_endpoint(request, state)


async def _tokenize(request: Request, state: BackendState) -> Response:
    body = await _json_body(request)
    tok = state.tokenizer
    if "messages" in body and state.harmony:  # vLLM 0.32's /tokenize uses the HF template here (docs/backend.md)
        from rollout_dataset.backend.harmony_endpoint import harmony_request_prompt

        messages, tools, _, _ = chat_inputs(body)
        ids = harmony_request_prompt(state, body, messages, tools)
    elif "messages" in body:
        messages, tools, _, kwargs = chat_inputs(body)
        try:
            text = render_chat(tok, tokenize_conversation(messages), tools, bool_param(body, "add_generation_prompt", True),
                               kwargs)
        except ValueError as exc:
            raise RequestError(str(exc), param="messages") from None
        ids = list(tok.encode(text, add_special_tokens=bool_param(body, "add_special_tokens", False)))
    elif isinstance(body.get("prompt"), str):
        ids = list(tok.encode(body["prompt"], add_special_tokens=bool_param(body, "add_special_tokens", True)))
    else:
        raise validation_error("body.prompt", "missing", "Field required (prompt or messages)", body)
    strs = tok.convert_ids_to_tokens(ids) if bool_param(body, "return_token_strs") else None
    return JSONResponse({"count": len(ids), "max_model_len": state.max_model_len, "tokens": ids, "token_strs": strs})


async def _detokenize(request: Request, state: BackendState) -> Response:
    body = await _json_body(request)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise validation_error("body.tokens", "list_type", "Input should be a valid list of integers", tokens)
    # as vLLM does, ids outside the vocabulary decode to nothing (no error)
    known = [t for t in tokens if 0 <= t < len(state.tokenizer)]
    text = state.tokenizer.decode(known, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return JSONResponse({"prompt": text})


async def _health(request: Request) -> Response:
    return Response(status_code=200)


async def _version(request: Request, state: BackendState) -> Response:
    from rollout_dataset._version import __version__

    return JSONResponse({"version": __version__, "server": P.LOCAL_BACKEND_KIND, "policy": state.policy_name,
                         "emulates": f"vllm-{P.EMULATED_VLLM_VERSION}"})


def policy_name(policy: Policy | str) -> str:
    """A policy's name: the registered name, else its class name without ``Policy``, lower case.

    Args:
        policy: a policy name or object.

    Returns:
        e.g. ``"oracle"`` for `OraclePolicy`.
    """
    if isinstance(policy, str):
        return policy
    name = getattr(policy, "name", None)
    if isinstance(name, str) and name:
        return name
    cls = type(policy).__name__
    return (cls[:-len("Policy")] if cls.endswith("Policy") and cls != "Policy" else cls).lower()


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
    policy_kwargs: dict[str, Any] | None = None,
    reasoning_parser: str | None = None,
    harmony_start_date: str | None = None,
    tool_call_parser: str | None = None,
) -> Starlette:
    """Build the local backend's ASGI app.

    Args:
        tokenizer: `"builtin"`, `"harmony"` (gpt-oss's o200k_harmony; chat prompts rendered by
            `openai_harmony` as vLLM 0.32 does for gpt-oss: `rollout_dataset.harmony`), a
            tokenizer folder, a Hub id, or a loaded tokenizer.
        policy: a policy object or a registered policy name (`echo`, `script`, `oracle`, ...).
        served_model_name: the model name clients must use (or omit).
        script: the script file or steps for `policy="script"`.
        max_model_len: the context length (prompt + output tokens).
        token_delay: seconds between stream chunks (for tests that need a slow stream).
        return_tokens_as_token_ids: server-wide default for `return_tokens_as_token_ids`
            (vLLM's `--return-tokens-as-token-ids`).
        policy_kwargs: extra keyword arguments for `make_policy`.
        reasoning_parser: vLLM's `--reasoning-parser` (`qwen3` or `deepseek_r1`; see
            `rollout_dataset.backend.reasoning_parser`; `openai_gptoss` with the Harmony tokenizer),
            or None for none.
        harmony_start_date: the Harmony system message's `Current date` (YYYY-MM-DD; None: today).
        tool_call_parser: vLLM's `--tool-call-parser` (`hermes`, the default, or `deepseek_v3`; see
            `rollout_dataset.backend.tool_parsers`); Harmony always uses its own.

    Returns:
        The Starlette app (its `state.backend` is the `BackendState`).

    Raises:
        ValueError: unknown policy name or bad script, or a reasoning parser the tokenizer cannot serve.
        FileNotFoundError: tokenizer or script file missing.
    """
    spec = tokenizer if isinstance(tokenizer, str) else getattr(tokenizer, "name_or_path", "custom")
    if Path(str(spec)).resolve() == BUILTIN_TOKENIZER_DIR.resolve():
        spec = "builtin"  # not this machine's install path
    if tokenizer == HARMONY_TOKENIZER:  # not load_tokenizer's cached one: the start date is the app's
        tok = load_harmony_tokenizer(harmony_start_date)
    else:
        tok = load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    harmony = isinstance(tok, HarmonyTokenizer)
    if harmony and reasoning_parser not in (None, HARMONY_REASONING_PARSER):
        raise ValueError(f"--reasoning-parser {reasoning_parser}: Harmony (gpt-oss) takes only "
                         f"{HARMONY_REASONING_PARSER}, as vLLM")
    if harmony and tool_call_parser not in (None, "hermes"):
        raise ValueError(f"--tool-call-parser {tool_call_parser}: Harmony (gpt-oss) reads its own tool calls")
    if not harmony and reasoning_parser == HARMONY_REASONING_PARSER:
        raise ValueError(f"--reasoning-parser {HARMONY_REASONING_PARSER} needs --tokenizer {HARMONY_TOKENIZER}")
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
        policy_name=policy_name(policy),
        reasoning=make_reasoning_parser(reasoning_parser, tok) if reasoning_parser and not harmony else None,
        harmony_reasoning=harmony and reasoning_parser == HARMONY_REASONING_PARSER,
        tools=make_tool_call_format(tool_call_parser, tok) if not harmony else ToolCallFormat(),
    )
    routes = [
        Route("/v1/models", _handler(_models), methods=["GET"]),
        Route("/v1/chat/completions", _handler(_chat), methods=["POST"]),
        Route("/v1/completions", _handler(_completions), methods=["POST"]),
        Route("/v1/responses", _handler(_responses), methods=["POST"]),
        Route("/v1/messages", _handler(_messages), methods=["POST"]),
        Route("/v1/messages/count_tokens", _handler(_messages_count_tokens), methods=["POST"]),
        Route("/tokenize", _handler(_tokenize), methods=["POST"]),
        Route("/detokenize", _handler(_detokenize), methods=["POST"]),
        Route("/health", _health, methods=["GET"]),
        Route("/version", _handler(_version), methods=["GET"]),
    ]
    # starlette types every handler as taking any Exception; _http_error is registered for HTTPException only
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error,  # type: ignore[dict-item]
                                                       Exception: _server_error})
    app.state.backend = state
    return app
