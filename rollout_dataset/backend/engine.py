"""Turning a policy's text into what a vLLM engine would have produced: token ids, per-token text
deltas, logprobs, stop handling and finish reasons.

The emitted text is encoded *in context* (prompt text + emitted text, keeping the ids after the
prompt) so that a later prompt that contains this assistant turn verbatim tokenizes to the same ids;
the end-of-turn token `<|im_end|>` (the tokenizer's eos) is appended when the output ends naturally.
Then the ids are walked one by one as an engine would sample them: text is detokenized
incrementally (bytes of an incomplete UTF-8 character are held back), stop strings end the output
(the stop string is cut from the text, the token that completed it stays in the ids, as vLLM does),
and `max_tokens` ends it with finish reason `length`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from rollout_dataset.backend.bigram import BigramModel
from rollout_dataset.tokenizers import encode_text

__all__ = ["TokenStep", "Generation", "context_encode", "generate"]


@dataclass
class TokenStep:
    """One generated token.

    Args:
        token_id: the id.
        delta: the output text this token added ("" while bytes are held back or for eos).
        logprob: its log-probability under the bigram model.
        prev_id: the token it was conditioned on (for `top_logprobs`).
        held: ids of earlier tokens whose bytes were still held back (an incomplete UTF-8
            character) when this token came; logprob token strings are decoded in that context.
    """

    token_id: int
    delta: str
    logprob: float
    prev_id: int | None
    held: tuple[int, ...] = ()


@dataclass
class Generation:
    """The engine output of one choice.

    Args:
        steps: one entry per generated token.
        text: the output text (stop string and eos removed).
        finish_reason: "stop" or "length".
        stop_reason: the stop string that ended the output, or None.
    """

    steps: list[TokenStep] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "stop"
    stop_reason: str | int | None = None

    @property
    def token_ids(self) -> list[int]:
        """Returns: the generated ids (the eos included when the output ended naturally)."""
        return [s.token_id for s in self.steps]

    @property
    def logprobs(self) -> list[float]:
        """Returns: one log-probability per generated token."""
        return [s.logprob for s in self.steps]


def context_encode(tokenizer: Any, prompt_text: str | None, prompt_ids: Sequence[int], text: str) -> list[int]:
    """Encode `text` as it tokenizes right after the prompt.

    Args:
        tokenizer: the serving tokenizer.
        prompt_text: the rendered prompt (None when the prompt was given as ids).
        prompt_ids: the prompt's ids.
        text: the text to encode.

    Returns:
        The ids of `text` as they appear in `encode(prompt_text + text)` (or `encode(text)` when the
        prompt's own ids are not a prefix of that encoding).
    """
    if not text:
        return []
    if prompt_text:
        full = encode_text(tokenizer, prompt_text + text)
        n = len(prompt_ids)
        if full[:n] == list(prompt_ids):
            return full[n:]
    return encode_text(tokenizer, text)


def _earliest_stop(text: str, start: int, stops: Sequence[str]) -> tuple[int, str] | None:
    best = None
    for s in stops:
        if not s:
            continue
        idx = text.find(s, max(0, start - len(s) + 1))
        if idx >= 0 and (best is None or idx < best[0]):
            best = (idx, s)
    return best


def generate(
    tokenizer: Any,
    model: BigramModel,
    prompt_ids: Sequence[int],
    emitted_text: str,
    *,
    prompt_text: str | None = None,
    max_tokens: int | None = None,
    stop: Sequence[str] = (),
    include_stop_str_in_output: bool = False,
    ignore_eos: bool = False,
    ids: Sequence[int] | None = None,
) -> Generation:
    """Produce the engine output for a text the policy chose.

    Args:
        tokenizer: the serving tokenizer.
        model: the bigram model that scores the tokens.
        prompt_ids: the prompt's token ids (the last one conditions the first output token).
        emitted_text: the full text the policy wants to say (tool-call markup included).
        prompt_text: the rendered prompt, for in-context encoding.
        max_tokens: the largest number of output tokens (None: no limit).
        stop: stop strings.
        include_stop_str_in_output: keep the stop string in the text.
        ignore_eos: do not append the eos token (the output then ends with finish reason "length").
        ids: emit exactly these ids instead of encoding `emitted_text` (e.g. a non-canonical
            tokenization of some text); the eos is appended as for text.

    Returns:
        The `Generation`.
    """
    eos = tokenizer.eos_token_id
    ids = list(ids) if ids is not None else context_encode(tokenizer, prompt_text, prompt_ids, emitted_text)
    if eos is not None and not ignore_eos:
        ids.append(eos)
    gen = Generation()
    prev = prompt_ids[-1] if len(prompt_ids) else None
    pending: list[int] = []
    text = ""
    limit = max_tokens if max_tokens is not None else len(ids)
    for tok in ids:
        if len(gen.steps) >= limit:
            break
        lp = model.logprob(prev, tok)
        if tok == eos and not ignore_eos:
            gen.steps.append(TokenStep(tok, "", lp, prev, tuple(pending)))
            gen.finish_reason = "stop"
            gen.text = text
            return gen
        held = tuple(pending)
        pending.append(tok)
        piece = tokenizer.decode(pending, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        last_step = len(gen.steps) + 1 >= limit
        if piece.endswith("\ufffd") and not last_step:
            delta = ""
        else:
            delta, pending = piece, []
        before = len(text)
        new_text = text + delta
        hit = _earliest_stop(new_text, before, stop) if delta else None
        if hit is not None:
            idx, s = hit
            cut = idx + len(s) if include_stop_str_in_output else idx
            new_text = new_text[:cut]
            delta = new_text[before:] if len(new_text) > before else ""
            gen.steps.append(TokenStep(tok, delta, lp, prev, held))
            gen.text = new_text
            gen.finish_reason = "stop"
            gen.stop_reason = s
            return gen
        gen.steps.append(TokenStep(tok, delta, lp, prev, held))
        text = new_text
        prev = tok
    gen.text = text
    gen.finish_reason = "length"
    return gen
