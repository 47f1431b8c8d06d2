"""The SSE stream of a chat completion: one loop for the chat endpoint and the Harmony one.

For each choice: a role chunk (with the prompt ids when `return_token_ids`), then one chunk per
sampled token — its delta as the endpoint's reader makes it (`ChoiceDeltas`: the hermes tool parser
and a reasoning parser, or Harmony's reply parser), its logprobs, its id, the finish and stop reason
on the last — where vLLM sends one (`protocol.step_choice`); then the usage chunk when asked, and
``[DONE]``. With the reasoning hidden (`include_reasoning: false`), every delta still sent carries
``reasoning: null`` and no ids (vLLM 0.32).
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Protocol, Sequence

from rollout_dataset.backend import protocol as P
from rollout_dataset.backend.engine import Generation, TokenStep
from rollout_dataset.backend.params import CommonParams
from rollout_dataset.wire.sse import DONE, encode_event, encode_json_event

__all__ = ["ChoiceDeltas", "chat_stream"]


class ChoiceDeltas(Protocol):
    """How one choice's tokens read as stream deltas (one reader per choice)."""

    @property
    def tools_streamed(self) -> bool:
        """A delta so far held tool calls (the stream's finish reason then says so)."""
        ...

    def delta(self, step: TokenStep, last: bool) -> dict[str, Any] | None:
        """The delta of one token (None: nothing to say for it); `last`: the choice's last token."""
        ...


async def chat_stream(state: Any, common: CommonParams, gens: list[Generation], fmt: P.TokenFormatter, rid: str,
                      created: int, prompt_ids: Sequence[int], want_logprobs: bool, top_k: int, tool_choice: Any,
                      hide_reasoning: bool, reader: Callable[[Generation], ChoiceDeltas],
                      reasoning_tokens: Callable[[], int | None]) -> AsyncIterator[bytes]:
    """The SSE bytes of a streamed chat completion (see the module docstring).

    Args:
        state: the `BackendState` (`token_delay`, `fingerprint`).
        common: the request's checked parameters.
        gens: one generation per choice.
        fmt: the logprob token formatter.
        rid: the completion id.
        created: Unix time.
        prompt_ids: the prompt's ids.
        want_logprobs: send each token's logprobs.
        top_k: how many top logprobs.
        tool_choice: the request's tool_choice (the streamed finish reason depends on it).
        hide_reasoning: `include_reasoning: false` under a reasoning parser.
        reader: a fresh `ChoiceDeltas` for a choice.
        reasoning_tokens: the usage's reasoning token count, asked once every choice was streamed.

    Yields:
        Encoded SSE events.
    """
    model = common.model
    for i, g in enumerate(gens):
        role_choice = {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                       "finish_reason": None}
        yield encode_json_event(P.chat_chunk(rid, created, model, role_choice,
                                             prompt_token_ids=list(prompt_ids) if common.return_token_ids else None,
                                             prompt_text=None))
        deltas = reader(g)
        for j, step in enumerate(g.steps):
            if state.token_delay:
                await asyncio.sleep(state.token_delay)
            last = j == len(g.steps) - 1
            delta = deltas.delta(step, last)
            if hide_reasoning and delta:  # vLLM sets `reasoning: null` on every delta it still sends
                delta = {k: None if k == "reasoning" else delta[k] for k in ("content", "reasoning", "tool_calls")
                         if k in delta or k == "reasoning"}
            logprobs = P.chat_logprobs([step], fmt, top_k) if want_logprobs else None
            send_ids = common.return_token_ids and not hide_reasoning
            finish = P.streamed_finish_reason(g.finish_reason, deltas.tools_streamed, tool_choice)
            choice = P.step_choice(i, delta, logprobs, step.token_id, last=last, send_ids=send_ids,
                                   finish_reason=finish, stop_reason=g.stop_reason)
            if choice is None:
                continue
            extra = {"system_fingerprint": state.fingerprint} if last and not common.include_usage else {}
            yield encode_json_event(P.chat_chunk(rid, created, model, choice, **extra))
    if common.include_usage:
        n_out = sum(len(g.steps) for g in gens)
        usage = P.usage_dict(len(prompt_ids), n_out, full=False, reasoning_tokens=reasoning_tokens())
        yield encode_json_event(P.usage_chunk(rid, created, model, "chat.completion.chunk", usage, state.fingerprint))
    yield encode_event(DONE)
