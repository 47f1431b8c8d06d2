"""vLLM 0.32's pre-tokenized chat prompt: ``kv_transfer_params.prompt_token_ids``.

vLLM's chat endpoint (``vllm/renderers/online_renderer.py``, ``_reused_prompt_token_ids``) takes the
prompt ids from ``kv_transfer_params.prompt_token_ids`` instead of rendering ``messages`` when the
field is a list of ids, ``echo`` is off and every message holds text only. ``messages`` still drive
tool and reasoning parsing and the policy's answer; the engine generates from exactly those ids and
returns them as ``prompt_token_ids``. The local backend does the same, with this one check.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rollout_dataset.backend.params import RequestError, validation_error
from rollout_dataset.proxy.on_policy import text_only  # one definition: the proxy predicts what vLLM ignores

__all__ = ["reused_prompt_ids", "text_only"]


def reused_prompt_ids(body: Mapping[str, Any], messages: Sequence[Mapping[str, Any]],
                      vocab_size: int) -> list[int] | None:
    """The prompt ids a chat request supplies itself, when the server would use them.

    Args:
        body: the chat request body.
        messages: its checked messages.
        vocab_size: the tokenizer's size (ids must be below it).

    Returns:
        The ids, or None when the request supplies none or the server ignores them (``echo``,
        non-text content, no ``prompt_token_ids`` key).

    Raises:
        RequestError: ``kv_transfer_params`` is not an object, the ids are not a non-empty list of
            non-negative integers, or an id is outside the vocabulary (vLLM 0.32's messages).
    """
    params = body.get("kv_transfer_params")
    if params is None:
        return None
    if not isinstance(params, Mapping):
        raise validation_error("body.kv_transfer_params", "dict_type", "Input should be a valid dictionary", params)
    ids = params.get("prompt_token_ids")
    if ids is None or body.get("echo") or not text_only(messages):
        return None
    if (not isinstance(ids, list) or not ids
            or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)):
        raise RequestError("`kv_transfer_params['prompt_token_ids']` must be a non-empty list of non-negative "
                           "integers. (parameter=kv_transfer_params.prompt_token_ids)",
                           param="kv_transfer_params.prompt_token_ids")
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise RequestError(f"Token id {bad} is out of vocabulary (parameter=kv_transfer_params.prompt_token_ids)",
                           param="kv_transfer_params.prompt_token_ids")
    return list(ids)
