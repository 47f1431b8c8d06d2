"""Token capture for generation calls: what to add upstream, what to strip, where ids come from.

The proxy asks the model server for `return_token_ids` and `logprobs`, records what came back, and
hands the harness a response in which everything it did not ask for looks exactly as the server
sends it when not asked (vLLM keeps the keys with `null` values). Completion ids come from vLLM's
`token_ids`, or, on servers run with `--return-tokens-as-token-ids`, from logprob tokens of the
form ``token_id:N``. Ids are never re-rendered from text here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollout_dataset.proxy.responses_capture import prepare_responses, responses_token_fields, strip_responses
from rollout_dataset.proxy.jsoncodec import dumps_standard, encode_record

__all__ = [
    "GENERATION_ENDPOINTS",
    "SAMPLING_PARAMS",
    "TokenRequest",
    "prepare_request",
    "strip_response",
    "token_fields",
    "sampling_params",
]

# endpoint path -> kind
GENERATION_ENDPOINTS: dict[str, str] = {"/v1/chat/completions": "chat", "/v1/completions": "completions",
                                        "/v1/responses": "responses"}

SAMPLING_PARAMS: tuple[str, ...] = (
    "model", "temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "max_output_tokens",
    "min_tokens",
    "seed", "stop", "stop_token_ids", "n", "best_of", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "length_penalty", "logit_bias", "logprobs", "top_logprobs", "prompt_logprobs",
    "ignore_eos", "skip_special_tokens", "include_stop_str_in_output", "use_beam_search", "stream",
    "stream_options", "return_token_ids", "return_tokens_as_token_ids", "tool_choice", "parallel_tool_calls",
    "response_format", "reasoning_effort", "chat_template_kwargs", "include", "enable_response_messages",
)
_SAMPLING_ORDER = {key: position for position, key in enumerate(SAMPLING_PARAMS)}

_TOKEN_ID_PREFIX = "token_id:"


@dataclass
class TokenRequest:
    """What the harness asked for, and what the proxy sends upstream instead.

    Attributes:
        kind: ``"chat"``, ``"completions"`` or ``"responses"``.
        asked_ids: the harness itself asked for ``return_token_ids`` (responses: ``enable_response_messages``).
        asked_logprobs: the harness itself asked for logprobs (responses: the output-text logprobs).
        changes: fields the proxy added or changed, with the values sent upstream.
        body: the upstream body as bytes.
    """

    kind: str
    asked_ids: bool
    asked_logprobs: bool
    changes: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""
    top_logprobs_set: bool = False  # responses: the harness set `top_logprobs` itself
    source: dict[str, Any] | None = None  # responses: the harness's body, to send again without logprobs

    @property
    def needs_strip(self) -> bool:
        """Whether responses must be edited before the harness sees them."""
        return not (self.asked_ids and self.asked_logprobs)


def prepare_request(kind: str, parsed: dict[str, Any], raw: bytes,
                    limits: dict[str, Any] | None = None) -> TokenRequest:
    """Decide the upstream request for a generation call.

    When the added fields are absent from the harness's body, they are appended to the raw bytes
    (no re-encoding of a large request); when the harness set them to something else, the body is
    re-encoded from the parsed object.

    Args:
        kind: ``"chat"`` or ``"completions"``.
        parsed: the harness's body, parsed (a JSON object; not modified).
        raw: the harness's body as received.
        limits: output limits to send instead of the harness's (context fitting), recorded as changes.

    Returns:
        The `TokenRequest` with the upstream body and the recorded changes.
    """
    if kind == "responses":  # the Responses API: rollout_dataset.proxy.responses_capture
        asked_ids, asked_logprobs, sent, upstream_body = prepare_responses(parsed, limits)
        return TokenRequest(kind, asked_ids, asked_logprobs, sent, upstream_body, "top_logprobs" in parsed, parsed)
    asked_ids = parsed.get("return_token_ids") is True
    if kind == "chat":
        asked_logprobs = bool(parsed.get("logprobs"))
        logprob_value: Any = True
    else:
        asked_logprobs = parsed.get("logprobs") is not None
        logprob_value = 0
    changes: dict[str, Any] = {}
    if not asked_ids:
        changes["return_token_ids"] = True
    if not asked_logprobs:
        changes["logprobs"] = logprob_value
    changes.update(limits or {})
    if not changes:
        return TokenRequest(kind, asked_ids, asked_logprobs, changes, raw)
    if all(key not in parsed for key in changes):
        stripped = raw.rstrip()
        if stripped.endswith(b"}"):
            extra = encode_record(changes)[1:-1]  # compact, as the standard encoder writes these names and numbers
            head = stripped[:-1].rstrip()
            sep = b"" if head.endswith(b"{") else b","
            return TokenRequest(kind, asked_ids, asked_logprobs, changes, head + sep + extra + b"}")
    body = dict(parsed)
    body.update(changes)
    encoded = dumps_standard(body)  # a lone surrogate goes upstream as its \uXXXX escape, as it came
    return TokenRequest(kind, asked_ids, asked_logprobs, changes, encoded)


def strip_response(obj: Any, req: TokenRequest) -> Any | None:
    """What the harness gets: a copy with what the proxy asked for, and the harness did not, nulled.

    Works on a full response and on one stream chunk alike. Keys are kept (with ``null``) because
    vLLM sends them with ``null`` when not asked; keys the server never sent are not added. The
    input is not modified: only the dicts that change are copied, so the recorded response keeps
    everything.

    Args:
        obj: a parsed response or chunk.
        req: the call's `TokenRequest`.

    Returns:
        The edited copy, or None when nothing had to change (forward the original bytes).
    """
    if not isinstance(obj, dict) or not req.needs_strip:
        return None
    if req.kind == "responses":
        return strip_responses(obj, req.asked_ids, req.asked_logprobs, req.top_logprobs_set)
    out: dict[str, Any] | None = None
    if not req.asked_ids and obj.get("prompt_token_ids") is not None:
        out = dict(obj)
        out["prompt_token_ids"] = None
    choices = obj.get("choices")
    if isinstance(choices, list):
        new_choices = []
        touched = False
        for choice in choices:
            if isinstance(choice, dict):
                edited = None
                if not req.asked_ids:
                    for key in ("token_ids", "prompt_token_ids"):
                        if choice.get(key) is not None:
                            edited = edited if edited is not None else dict(choice)
                            edited[key] = None
                if not req.asked_logprobs and choice.get("logprobs") is not None:
                    edited = edited if edited is not None else dict(choice)
                    edited["logprobs"] = None
                if edited is not None:
                    choice = edited
                    touched = True
            new_choices.append(choice)
        if touched:
            out = out if out is not None else dict(obj)
            out["choices"] = new_choices
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_INT = {int}
_FLOAT = {float}
_NUMBER = {int, float}


def _int_list(value: Any) -> bool:
    """Whether a value is a list of integers (token ids of the right type; parsed JSON: exact types)."""
    return isinstance(value, list) and set(map(type, value)) <= _INT


def _ids_from_token_strings(tokens: list[Any]) -> list[int] | None:
    ids = []
    for token in tokens:
        if not isinstance(token, str) or not token.startswith(_TOKEN_ID_PREFIX):
            return None
        try:
            ids.append(int(token[len(_TOKEN_ID_PREFIX):]))
        except ValueError:
            return None
    return ids


def _choice_logprobs(choice: dict[str, Any]) -> tuple[list[Any] | None, list[Any] | None, bool]:
    """(logprob entries or token strings, logprob values, chat layout) of a choice.

    In the chat layout the first item is the ``logprobs.content`` entries (their token strings are
    read only when needed: `_entry_tokens`), and the values list is built here; in the completions
    layout both are the answer's own lists.
    """
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None, None, False
    content = lp.get("content")
    if isinstance(content, list):
        return content, [c.get("logprob") for c in content], True
    tokens, values = lp.get("tokens"), lp.get("token_logprobs")
    if isinstance(tokens, list) and isinstance(values, list):
        return tokens, values, False
    return None, None, False


def _choice_fields(choice: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    idx = choice.get("index", 0)
    tokens, values, chat = _choice_logprobs(choice)
    ids = choice.get("token_ids")
    source = None
    if ids is not None and not _int_list(ids):
        notes.append(f"choice {idx}: token_ids is not a list of integers; ignored")
        ids = None
    if isinstance(ids, list):
        source = "return_token_ids"
    else:
        ids = None
        if tokens:
            ids = _ids_from_token_strings([c.get("token") for c in tokens] if chat else tokens)
            if ids is not None:
                source = "token_id_strings"
    logps = None
    if values is not None:
        types = set(map(type, values))
        if types <= _FLOAT and chat:  # a list built here of floats only: kept as it is
            logps = values
        elif types <= _NUMBER:  # parsed JSON: exact types (a bool is not a number here)
            logps = [float(v) for v in values]
        else:
            notes.append(f"choice {idx}: some logprobs are not numbers; per_token_logps left null")
    if ids is not None and logps is not None and len(ids) != len(logps):
        notes.append(f"choice {idx}: {len(ids)} completion ids but {len(logps)} logprobs")
    return {
        "index": idx,
        "token_ids": ids,
        "per_token_logps": logps,
        "finish_reason": choice.get("finish_reason"),
        "source": source,
    }


def token_fields(response: Any, kind: str | None) -> dict[str, Any]:
    """The trace record's token fields, read from a full (or reassembled) response.

    Args:
        response: the parsed response, as the server sent it (before stripping), or None.
        kind: ``"chat"``, ``"completions"``, or None for other endpoints.

    Returns:
        A dict with ``prompt_token_ids``, ``completion_token_ids``, ``per_token_logps``,
        ``finish_reason``, ``usage``, ``choices_token_ids``, ``token_source``, ``capture_level``
        and ``notes`` (a list of observations).
    """
    out: dict[str, Any] = {
        "prompt_token_ids": None,
        "completion_token_ids": None,
        "per_token_logps": None,
        "finish_reason": None,
        "usage": None,
        "choices_token_ids": None,
        "token_source": None,
        "capture_level": "none",
        "notes": [],
    }
    if kind is None or not isinstance(response, dict):
        if kind is not None and response is not None and not isinstance(response, str):  # text: noted where read
            out["notes"].append(f"the answer is a JSON {type(response).__name__}, not a JSON object; "
                                "no token fields read")
        return out
    if kind == "responses":
        return responses_token_fields(response, out)
    if kind == "messages":  # a Messages answer forwarded natively (no chat endpoint upstream): text only
        if isinstance(response.get("content"), list):
            out["capture_level"] = "text"
            out["usage"] = response.get("usage") if isinstance(response.get("usage"), dict) else None
            out["finish_reason"] = response.get("stop_reason")
            out["notes"].append("the model server returned no token ids (native /v1/messages); recorded as text")
        return out
    notes: list[str] = out["notes"]
    usage = response.get("usage")
    out["usage"] = usage if isinstance(usage, dict) else None
    choices = [c for c in response.get("choices") or () if isinstance(c, dict)]
    if not choices:
        return out
    if all(_is_int(c.get("index", 0)) for c in choices):
        if len(choices) > 1:
            choices.sort(key=lambda c: c.get("index", 0))
    else:
        notes.append("a choice's index is not an integer; choices kept in the order they came")
    first = choices[0]
    prompt_ids = response.get("prompt_token_ids")
    if prompt_ids is None:
        prompt_ids = first.get("prompt_token_ids")
    if prompt_ids is not None and not _int_list(prompt_ids):
        notes.append("prompt_token_ids is not a list of integers; ignored")
        prompt_ids = None
    out["prompt_token_ids"] = list(prompt_ids) if isinstance(prompt_ids, list) else None
    per_choice = [_choice_fields(c, notes) for c in choices]
    head = per_choice[0]
    out["completion_token_ids"] = head["token_ids"]
    out["per_token_logps"] = head["per_token_logps"]
    out["finish_reason"] = head["finish_reason"]
    out["token_source"] = head["source"]
    if len(per_choice) > 1:
        out["choices_token_ids"] = [
            {k: c[k] for k in ("index", "token_ids", "per_token_logps", "finish_reason")} for c in per_choice
        ]
    if out["completion_token_ids"] is not None and out["prompt_token_ids"] is not None:
        out["capture_level"] = "tokens"
    else:
        out["capture_level"] = "text"
        if out["completion_token_ids"] is None:
            notes.append("the server returned no completion token ids; recorded as text")
        else:
            notes.append("the server returned no prompt token ids; recorded as text")
    if out["usage"] is not None and all(c["token_ids"] is not None for c in per_choice):
        expected = out["usage"].get("completion_tokens")
        got = sum(len(c["token_ids"]) for c in per_choice)
        if isinstance(expected, int) and expected != got:
            notes.append(f"completion ids ({got}) disagree with usage.completion_tokens ({expected})")
    if out["usage"] is not None and out["prompt_token_ids"] is not None and (kind == "chat" or len(choices) == 1):
        expected = out["usage"].get("prompt_tokens")
        got = len(out["prompt_token_ids"])
        if isinstance(expected, int) and expected != got:
            notes.append(f"prompt ids ({got}) disagree with usage.prompt_tokens ({expected})")
    return out


def sampling_params(body: Any) -> dict[str, Any]:
    """The sampling parameters found in a request body.

    Args:
        body: a parsed request body.

    Returns:
        The subset of `SAMPLING_PARAMS` present in the body (empty for non-objects).
    """
    if not isinstance(body, dict):
        return {}
    present = sorted((key for key in body if key in _SAMPLING_ORDER), key=_SAMPLING_ORDER.__getitem__)
    return {key: body[key] for key in present}  # in SAMPLING_PARAMS' order, looking only at the body's keys
