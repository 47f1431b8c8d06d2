"""Decode through the model server when no local tokenizer is available.

vLLM (and the local backend, which serves the same endpoints) exposes ``POST /detokenize``
(``{"model", "tokens"}`` -> ``{"prompt"}``) and ``POST /tokenize`` (``{"model", "messages",
"tools", "add_generation_prompt"}`` -> ``{"tokens"}``) at the server root. `ServerTokenizer` offers the
two tokenizer methods `rollout_dataset.render` calls, so samples.md always shows the server's own
token stream with its special tokens, whatever server produced it.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import httpx

from rollout_dataset.capture.provenance import PROBE_TIMEOUT_S
from rollout_dataset.errors import UpstreamError, UpstreamStatusError
from rollout_dataset.proxy.upstream import UpstreamTarget, parse_upstream

__all__ = ["ServerTokenizer"]

log = logging.getLogger(__name__)


class ServerTokenizer:
    """The `decode` / `apply_chat_template` subset of a tokenizer, answered by the server.

    Args:
        upstream: the server's OpenAI base URL (``.../v1``; credentials in it are sent, never shown)
            or its `UpstreamTarget`.
        model: the served model name.
        timeout_s: per-request timeout.
    """

    def __init__(self, upstream: str | UpstreamTarget, model: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.target = parse_upstream(upstream) if isinstance(upstream, str) else upstream
        self.model = model
        self.timeout_s = timeout_s

    def close(self) -> None:
        """Nothing to release (each call uses its own connection); kept for the context manager."""

    def __enter__(self) -> "ServerTokenizer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.target.shown(path)
        try:
            response = self.target.request("POST", path, json=body, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{url}: {type(exc).__name__}: {self.target.scrub(str(exc))}") from None
        if response.status_code >= 400:
            raise UpstreamStatusError(response.status_code, url, self.target.scrub(response.text[:300]))
        try:
            data = response.json()
        except ValueError:
            raise UpstreamError(f"{url}: answered non-JSON") from None
        if not isinstance(data, dict):
            raise UpstreamError(f"{url}: answered {type(data).__name__}, not an object")
        return data

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False, **_: Any) -> str:
        """Text of token ids as the server decodes them (special tokens kept, as vLLM's /detokenize does).

        Args:
            ids: token ids.
            skip_special_tokens: must be False (the server keeps them).

        Returns:
            The text.

        Raises:
            UpstreamError: the server could not be reached or answered badly (UpstreamStatusError
                with the status and URL on 4xx/5xx).
        """
        if skip_special_tokens:
            raise ValueError("ServerTokenizer.decode keeps special tokens (the server's /detokenize does)")
        text = self._post("/detokenize", {"model": self.model, "tokens": [int(i) for i in ids]}).get("prompt")
        if not isinstance(text, str):
            raise UpstreamError(f"{self.target.shown('/detokenize')}: no 'prompt' text in the answer")
        return text

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: Any = None, tokenize: bool = False,
                            add_generation_prompt: bool = False, **_: Any) -> str | list[int]:
        """The server's own render of a conversation (its /tokenize, then /detokenize).

        Args:
            messages: chat messages.
            tools: tool schemas, or None.
            tokenize: return ids instead of text.
            add_generation_prompt: append the assistant header.

        Returns:
            The text (or ids with `tokenize`).

        Raises:
            UpstreamError: as `decode`.
        """
        body: dict[str, Any] = {"model": self.model, "messages": messages,
                                "add_generation_prompt": add_generation_prompt}
        if tools:
            body["tools"] = tools
        ids = self._post("/tokenize", body).get("tokens")
        if not isinstance(ids, list):
            raise UpstreamError(f"{self.target.shown('/tokenize')}: no 'tokens' list in the answer")
        return ids if tokenize else self.decode(ids)
