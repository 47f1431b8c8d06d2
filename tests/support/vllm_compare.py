"""Chat completions answers of the local backend and a genuine vLLM, reduced to what must agree.

For the opt-in comparisons against genuine vLLM servers (`tests/test_real_vllm_reasoning.py`,
`tests/test_real_vllm_harmony.py`): only ids of responses and tool calls, timestamps, fingerprints
and logprob values may differ; keys, types, texts, ids sampled and usage must not.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

__all__ = ["chunk_view", "comparable", "message_view", "one_token_chunks", "post_chat", "stream_chat"]


def post_chat(base: str, body: dict) -> dict:
    """A whole chat completions answer from `base` (``.../v1``); a non-200 answer fails the test."""
    r = httpx.post(f"{base}/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def stream_chat(base: str, body: dict) -> list[dict]:
    """The chunks of the streamed answer (usage included, ``[DONE]`` left out)."""
    with httpx.stream("POST", f"{base}/chat/completions", json={**body, "stream": True,
                      "stream_options": {"include_usage": True}}, timeout=120) as r:
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


def one_token_chunks(base: str, body: dict, tries: int = 5) -> list[dict]:
    """A genuine stream with one sampled token per chunk. A busy CPU engine now and then hands two steps
    to the server at once (one chunk, two ids); the local backend always streams one per chunk."""
    for _ in range(tries):
        chunks = stream_chat(base, body)
        if all(len(c["choices"][0].get("token_ids") or []) <= 1 for c in chunks if c["choices"]):
            return chunks
    pytest.fail(f"vLLM merged tokens into one chunk in {tries} streams in a row")


def comparable(x: Any, key: str = "") -> Any:
    """Values that must agree, with response/tool-call ids, times, fingerprints and logprob values blanked
    to their types (the local backend's logprobs are bigram values)."""
    if isinstance(x, dict):
        return {k: comparable(v, k) for k, v in x.items()}
    if isinstance(x, list):
        return [comparable(v) for v in x]
    if key in ("id", "created", "system_fingerprint"):
        return type(x).__name__
    if key == "logprob" or key == "top_logprobs" and not isinstance(x, list):
        return type(x).__name__
    return x


def message_view(resp: dict, *, stop_reason: bool = False) -> dict:
    """What must agree in a whole answer (`stop_reason`: compare the choice's stop reason too)."""
    choice = resp["choices"][0]
    view = {"message": comparable(choice["message"]), "finish_reason": choice["finish_reason"],
            "prompt_token_ids": resp["prompt_token_ids"], "token_ids": choice["token_ids"], "usage": resp["usage"],
            "logprob_tokens": [c["token"] for c in choice["logprobs"]["content"]] if choice["logprobs"] else None,
            "keys": (list(resp), list(choice), list(choice["message"]))}
    if stop_reason:
        view["stop_reason"] = choice["stop_reason"]
    return view


def chunk_view(chunks: list[dict], *, stop_reason: bool = False) -> list[Any]:
    """What must agree in each chunk of a stream (`stop_reason`: the choices' stop reasons too)."""
    view: list[Any] = []
    for c in chunks:
        if not c["choices"]:
            view.append(("usage", list(c), c["usage"]))
            continue
        ch = c["choices"][0]
        lp = [t["token"] for t in ch["logprobs"]["content"]] if ch.get("logprobs") else None
        row = (list(c), list(ch), comparable(ch["delta"]), ch.get("token_ids"), lp, ch["finish_reason"])
        view.append(row + (ch.get("stop_reason"),) if stop_reason else row)
    return view
