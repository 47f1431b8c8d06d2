"""What the local backend emits for a policy's answer: one definition for every endpoint.

The chat, Responses and Messages endpoints all turn a `PolicyOutput` into the text the model
"generates" (the chat template's rendering of the assistant turn, tool calls included) and keep
lone surrogates out of anything a tokenizer sees.
"""

from __future__ import annotations

import re
from typing import Any

from rollout_dataset.backend.policies import PolicyOutput
from rollout_dataset.backend.template import render_assistant_text

__all__ = ["emitted_text", "scrub_surrogates"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def emitted_text(out: PolicyOutput) -> str:
    """The text the backend generates for a policy's answer.

    Args:
        out: the policy's answer.

    Returns:
        The assistant turn as the chat template renders it (a think block first when the policy
        gave reasoning, tool calls included), lone surrogates replaced; ``""`` when the policy gave token ids (those are emitted as they are).
    """
    if out.token_ids is not None:
        return ""  # the ids themselves are emitted (see `generate(ids=...)`)
    body = render_assistant_text(out.text, [c.as_dict() for c in out.tool_calls])
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
