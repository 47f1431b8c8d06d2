"""`prompt_logprobs` on `/v1/completions`, in vLLM 0.32's shape (`vllm/v1/worker/gpu_model_runner.py`
`_get_prompt_logprobs_dict`, `entrypoints/openai/completion/protocol.py`).

Each choice carries ``prompt_logprobs``: ``None`` for the first prompt token (nothing conditions it),
then per position a dict keyed by token id (a JSON string key) of ``{"logprob", "rank",
"decoded_token"}``: the prompt token itself first, then the top ``N`` alternatives (the prompt token
appears once when it is among them). Prompt tokens skip the sampling processors, so the scores are
the model's at temperature 1 whatever the request's sampling. vLLM refuses ``prompt_logprobs`` with
``stream: true`` (when positive or -1) and any negative value but -1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from rollout_dataset.backend.params import RequestError

if TYPE_CHECKING:
    from rollout_dataset.backend.bigram import BigramModel

__all__ = ["prompt_logprobs_param", "prompt_logprobs"]


def prompt_logprobs_param(body: dict) -> int | None:
    """The request's `prompt_logprobs`, validated as vLLM does.

    Args:
        body: the request body.

    Returns:
        None when absent; else the number of alternatives per position (-1: the whole vocabulary).

    Raises:
        RequestError: not an integer, negative but -1, or asked with `stream: true`.
    """
    value = body.get("prompt_logprobs")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError("`prompt_logprobs` must be an integer.", param="prompt_logprobs")
    value = int(value)
    if body.get("stream") and (value > 0 or value == -1):
        raise RequestError("`prompt_logprobs` are not available when `stream=True`.", param="prompt_logprobs")
    if value < 0 and value != -1:
        raise RequestError(f"`prompt_logprobs` must be a positive value or -1. (parameter=prompt_logprobs, "
                           f"value={value})", param="prompt_logprobs")
    return value


def prompt_logprobs(model: BigramModel, tokenizer: Any, prompt_ids: Sequence[int], n: int) -> list[dict[str, Any] | None]:
    """The `prompt_logprobs` list of one prompt under the backend's bigram model.

    Args:
        model: the `BigramModel` (the same that scores sampled tokens, so captured and re-scored agree).
        tokenizer: the serving tokenizer (for `decoded_token`).
        prompt_ids: the prompt's ids.
        n: alternatives per position (-1: the whole vocabulary).

    Returns:
        One entry per prompt token, the first None.
    """
    def decoded(tok: int) -> str:
        return tokenizer.decode([tok], skip_special_tokens=False, clean_up_tokenization_spaces=False)

    out: list[dict[str, Any] | None] = [None] if prompt_ids else []
    k = model.vocab_size if n == -1 else n
    for prev, tok in zip(prompt_ids, prompt_ids[1:]):
        lp = model.logprob(prev, tok)
        top = model.top(prev, k) if k else []
        entry: dict[str, Any] = {str(tok): {"logprob": lp, "rank": model.rank(prev, tok), "decoded_token": decoded(tok)}}
        for i, (alt, alt_lp) in enumerate(top):
            entry.setdefault(str(alt), {"logprob": alt_lp, "rank": i + 1, "decoded_token": decoded(alt)})
        out.append(entry)
    return out
