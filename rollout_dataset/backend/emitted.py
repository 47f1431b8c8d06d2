"""What the local backend emits for a policy's answer: one definition for every endpoint.

The chat, Responses and Messages endpoints all turn a `PolicyOutput` into the text the model
"generates" (the chat template's rendering of the assistant turn, tool calls included) and keep
lone surrogates out of anything a tokenizer sees; the chat (Harmony's too) and completions
endpoints generate a request's `n` choices with `generate_choices`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Awaitable, Callable, Sequence

from rollout_dataset.backend.engine import Generation, generate
from rollout_dataset.backend.params import CommonParams
from rollout_dataset.backend.policies import PolicyOutput, PolicyRequest
from rollout_dataset.backend.template import render_assistant_text

__all__ = ["emitted_text", "scrub_surrogates", "generate_choices"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def emitted_text(out: PolicyOutput, render_calls: Callable[[str | None, list[dict[str, Any]]], str] | None = None) -> str:
    """The text the backend generates for a policy's answer.

    Args:
        out: the policy's answer.
        render_calls: how the template writes content and tool calls (the serving tool-call parser's
            `ToolCallFormat.render`); None: hermes (`render_assistant_text`).

    Returns:
        The assistant turn as the chat template renders it (a think block first when the policy
        gave reasoning, tool calls included), lone surrogates replaced; ``""`` when the policy gave token ids (those are emitted as they are).
    """
    if out.token_ids is not None:
        return ""  # the ids themselves are emitted (see `generate(ids=...)`)
    body = (render_calls or render_assistant_text)(out.text, [c.as_dict() for c in out.tool_calls])
    if out.reasoning is not None:  # Qwen3's layout of a think block
        body = f"<think>\n{out.reasoning}\n</think>\n\n{body}"
    return scrub_surrogates(body)


def scrub_surrogates(value: Any) -> Any:
    """Replace lone surrogates (text no encoder takes) in every string of a JSON value with U+FFFD.

    JSON may carry ``"\\udcff"`` and a policy may emit it, but no tokenizer or UTF-8 encoder
    takes it; U+FFFD is what a decoder yields for bytes it cannot read, so the model sees that.

    Args:
        value: any JSON value.

    Returns:
        The value with every lone surrogate in its strings (keys included) replaced.
    """
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [scrub_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {scrub_surrogates(k): scrub_surrogates(v) for k, v in value.items()}
    return value


async def generate_choices(state: Any, respond: Callable[[Any, PolicyRequest], Awaitable[PolicyOutput]],
                           request: PolicyRequest, common: CommonParams, prompt_ids: Sequence[int],
                           max_tokens: int | None, *, prompt_text: str | None = None,
                           reply_ids: Callable[[PolicyOutput], Sequence[int]] | None = None,
                           stop_token_ids: Sequence[int] = ()) -> list[Generation]:
    """A request's `n` choices, in order: the policy answers each, the engine generates what it emits.

    Args:
        state: the `BackendState` (its `tokenizer` and bigram `model`).
        respond: the app's policy call.
        request: what the policy answers; each choice gets it with its own `choice_index`.
        common: the request's checked parameters (`n`, `stop`, `include_stop_str`, `ignore_eos`).
        prompt_ids: the prompt's token ids.
        max_tokens: the output limit (None: none).
        prompt_text: the rendered prompt, for in-context encoding.
        reply_ids: the ids an answer emits (Harmony's messages); None: the answer's `emitted_text`,
            or its own token ids when it gave some.
        stop_token_ids: ids that end the output as the eos does.

    Returns:
        One generation per choice.
    """
    gens: list[Generation] = []
    for i in range(common.n):
        out = await respond(state, dataclasses.replace(request, choice_index=i))
        tools = getattr(state, "tools", None)
        text, ids = ((emitted_text(out, tools.render if tools is not None else None), out.token_ids)
                     if reply_ids is None else ("", reply_ids(out)))
        gens.append(generate(state.tokenizer, state.model, prompt_ids, text, prompt_text=prompt_text,
                             max_tokens=max_tokens, stop=common.stop, include_stop_str_in_output=common.include_stop_str,
                             ignore_eos=common.ignore_eos, ids=ids, stop_token_ids=stop_token_ids))
    return gens
