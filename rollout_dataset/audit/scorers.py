"""Scorers of the logprob audit, behind one small protocol: ``score(requests) -> logprobs per position``.

- `ServerScorer` (``--against URL``): the server's own prefill scores, `prompt_logprobs` on
  `/v1/completions` with the sequence's token ids as the prompt and `max_tokens` 1 (vLLM scores
  prompt tokens at temperature 1: prompt tokens skip the sampling processors).
- `TransformersScorer` (``--model PATH|HUB_ID``): one transformers forward pass per sequence, the
  log-softmax of the logits divided by each position's recorded temperature: what a trainer computes.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, Sequence, cast

from rollout_dataset.errors import ScorerError

__all__ = ["ScoreRequest", "Scorer", "ServerScorer", "TransformersScorer"]

logger = logging.getLogger(__name__)


@dataclass
class ScoreRequest:
    """One sequence to score.

    Args:
        input_ids: the whole sequence.
        temperatures: ``position -> temperature`` of the positions to score (others are not needed).
    """

    input_ids: list[int]
    temperatures: dict[int, float]


class Scorer(Protocol):
    """What the audit needs of a scorer."""

    @property
    def kind(self) -> str:
        """``"server"`` or ``"transformers"``."""

    @property
    def model(self) -> str:
        """The scoring model's name or folder."""

    @property
    def dtype(self) -> str | None:
        """The dtype the model scores in (None for a server, which does not say)."""

    @property
    def url(self) -> str | None:
        """The server's URL (None for in-process scoring)."""

    @property
    def supports_temperature(self) -> bool:
        """Whether scores can be taken at the sampling temperature."""

    def score(self, requests: Sequence[ScoreRequest]) -> list[list[float | None]]:
        """One logprob per position of each request (None where not scored)."""

    def decode(self, token_id: int) -> str:
        """The text of one token id."""

    def canonical_ids(self, ids: Sequence[int]) -> list[int] | None:
        """Re-encoding of the decoded ids under the scorer's tokenizer (None when it cannot say)."""

    def vocab_size(self) -> int | None:
        """The scorer's vocabulary size (None when unknown)."""


class ServerScorer:
    """Scores through a vLLM-compatible server's `prompt_logprobs`.

    Args:
        url: the OpenAI base URL (``http://host:port/v1``).
        model: the served model name (None: the first of `/v1/models`).
        concurrency: requests in flight at once.
        timeout_s: per request.

    Raises:
        ScorerError: the server does not answer `/v1/models`.
    """

    kind = "server"
    dtype = None
    supports_temperature = False

    def __init__(self, url: str, model: str | None = None, concurrency: int = 4, timeout_s: float = 600.0) -> None:
        import httpx

        self.url = url.rstrip("/")
        self._root = self.url[:-3] if self.url.endswith("/v1") else self.url
        self._client = httpx.Client(timeout=timeout_s, trust_env=False)
        self._concurrency = max(1, int(concurrency))
        self._decoded: dict[int, str] = {}
        try:
            cards = self._client.get(f"{self.url}/models").raise_for_status().json()["data"]
        except Exception as exc:  # noqa: BLE001 - any failure to list models (HTTP, JSON, shape) is the one ScorerError
            raise ScorerError(f"{self.url}/models: no model list ({type(exc).__name__}: {exc})") from None
        self.model = model or cards[0]["id"]
        self._max_len = next((c.get("max_model_len") for c in cards if c.get("id") == self.model), None)

    def _score_one(self, req: ScoreRequest) -> list[float | None]:
        ids = list(req.input_ids)
        if self._max_len and len(ids) + 1 > self._max_len:
            ids = ids[: self._max_len - 1]  # the prompt + max_tokens 1 must fit the context
        body = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
        resp = self._client.post(f"{self.url}/completions", json=body)
        if resp.status_code != 200:
            raise ScorerError(f"{self.url}/completions: HTTP {resp.status_code} {resp.text[:200]}")
        plp = resp.json()["choices"][0].get("prompt_logprobs")
        if not isinstance(plp, list):
            raise ScorerError(f"{self.url}/completions: the answer has no prompt_logprobs (the server does not "
                              "serve them)")
        out: list[float | None] = [None] * len(req.input_ids)
        for pos, entry in enumerate(plp[: len(ids)]):
            if entry is None:
                continue
            hit = entry.get(str(ids[pos]))
            if hit is not None:
                out[pos] = float(hit["logprob"])
                self._decoded.setdefault(ids[pos], hit.get("decoded_token") or "")
        return out

    def score(self, requests: Sequence[ScoreRequest]) -> list[list[float | None]]:
        """Score the requests, `concurrency` at a time.

        Raises:
            ScorerError: a request failed or the answer has no `prompt_logprobs`.
        """
        try:
            with ThreadPoolExecutor(self._concurrency) as pool:
                return list(pool.map(self._score_one, requests))
        except ScorerError:
            raise
        except Exception as exc:  # noqa: BLE001 - a worker's failure of any kind is the one ScorerError naming the URL
            raise ScorerError(f"{self.url}/completions: {type(exc).__name__}: {exc}") from None

    def decode(self, token_id: int) -> str:
        """The token's text (as the server decoded it, else via `/detokenize`)."""
        if token_id not in self._decoded:
            try:
                r = self._client.post(f"{self._root}/detokenize", json={"model": self.model, "tokens": [token_id]})
                self._decoded[token_id] = r.json().get("prompt", "") if r.status_code == 200 else ""
            except Exception:  # noqa: BLE001 - a token the server cannot decode is shown undecoded
                self._decoded[token_id] = ""
        return self._decoded[token_id]

    def canonical_ids(self, ids: Sequence[int]) -> list[int] | None:
        """`/detokenize` then `/tokenize` (without special tokens added); None when the server refuses."""
        try:
            text = self._client.post(f"{self._root}/detokenize", json={"model": self.model, "tokens": list(ids)})
            if text.status_code != 200:
                return None
            toks = self._client.post(f"{self._root}/tokenize", json={"model": self.model, "add_special_tokens": False,
                                                                      "prompt": text.json()["prompt"]})
            return list(toks.json()["tokens"]) if toks.status_code == 200 else None
        except Exception:  # noqa: BLE001 - no re-tokenization check when the server cannot give one
            return None

    def vocab_size(self) -> int | None:
        """Unknown over HTTP (the server refuses out-of-vocabulary ids itself)."""
        return None


class TransformersScorer:
    """Scores with a transformers causal LM forward pass (what a trainer computes).

    Args:
        model: a model folder or Hub id.
        device: torch device (``cpu``, ``cuda``, ...).
        dtype: ``float32``, ``bfloat16`` or ``float16``.
        batch_size: sequences per forward pass (right-padded).

    Raises:
        ScorerError: torch is missing (``pip install 'rollout-dataset[audit]'``) or the model does not load.
    """

    kind = "transformers"
    url = None
    supports_temperature = True

    def __init__(self, model: str, device: str = "cpu", dtype: str = "float32", batch_size: int = 4) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise ScorerError("--model needs torch: pip install 'rollout-dataset[audit]'") from None
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ScorerError(f"--dtype {dtype!r}: valid are float32, bfloat16, float16")
        self.model, self.dtype, self._device, self._batch = model, dtype, device, max(1, int(batch_size))
        self._torch = torch
        try:
            self._tok = AutoTokenizer.from_pretrained(model)
            # transformers wraps PreTrainedModel.to in functools.wraps, whose typing loses the method's self
            self._lm = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype)).to(device).eval()  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a model it cannot load; named as ScorerError
            raise ScorerError(f"--model {model}: could not load ({type(exc).__name__}: {exc})") from None

    def score(self, requests: Sequence[ScoreRequest]) -> list[list[float | None]]:
        """Score the requests, `batch_size` sequences per forward pass."""
        torch = self._torch
        out: list[list[float | None]] = []
        for start in range(0, len(requests), self._batch):
            chunk = requests[start:start + self._batch]
            longest = max((len(r.input_ids) for r in chunk), default=0)
            if longest == 0:
                out.extend([[] for _ in chunk])
                continue
            ids = torch.zeros((len(chunk), longest), dtype=torch.long)
            mask = torch.zeros((len(chunk), longest), dtype=torch.long)
            for i, r in enumerate(chunk):
                ids[i, :len(r.input_ids)] = torch.tensor(r.input_ids, dtype=torch.long)
                mask[i, :len(r.input_ids)] = 1
            with torch.no_grad():
                logits = self._lm(input_ids=ids.to(self._device), attention_mask=mask.to(self._device)).logits
            logits = logits.float()
            for i, r in enumerate(chunk):
                row: list[float | None] = [None] * len(r.input_ids)
                positions = sorted(p for p in r.temperatures if 0 < p < len(r.input_ids))
                if positions:
                    pos = torch.tensor(positions)
                    temps = torch.tensor([float(r.temperatures[p]) for p in positions]).unsqueeze(1)
                    lp = torch.log_softmax(logits[i, pos - 1].cpu() / temps, dim=-1)
                    picked = lp.gather(1, ids[i, pos].unsqueeze(1)).squeeze(1).tolist()
                    for p, v in zip(positions, picked):
                        row[p] = float(v)
                out.append(row)
        return out

    def decode(self, token_id: int) -> str:
        """The token's text."""
        # one sequence of ids decodes to one string (transformers annotates decode for batches as well)
        return cast("str", self._tok.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False))

    def canonical_ids(self, ids: Sequence[int]) -> list[int] | None:
        """Decode then encode with the model's tokenizer (no special tokens added)."""
        text = self._tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return list(self._tok.encode(text, add_special_tokens=False))

    def vocab_size(self) -> int | None:
        """The embedding rows of the model."""
        return int(self._lm.get_input_embeddings().weight.shape[0])
