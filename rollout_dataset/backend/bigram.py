"""The backend's language model: an add-one smoothed bigram over the tokenizer's vocabulary.

It does not choose what the backend says (a policy does); it assigns a real, recomputable
log-probability to every emitted token and gives the `top_logprobs` alternatives:

    log p(b | a) = log(count(a, b) + 1) - log(count(a) + V)

where the counts come from the tokenizer's training corpus (`rollout_dataset/tokenizer_data/corpus.txt`) encoded with
the serving tokenizer, `count(a)` is the number of bigrams starting with `a`, and `V = len(tokenizer)`.
The token before the first completion token is the last prompt token. Fitting takes a fraction of a
second and is cached per tokenizer.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR

__all__ = ["BigramModel", "bigram_for_tokenizer", "CORPUS_PATH"]

CORPUS_PATH = BUILTIN_TOKENIZER_DIR / "corpus.txt"


class BigramModel:
    """Add-one smoothed bigram log-probabilities over a vocabulary of `vocab_size` ids.

    Args:
        vocab_size: the number of token ids (`len(tokenizer)`).
        sequences: token id sequences to count bigrams in.
        default_prev: the context id used when there is no previous token.

    Raises:
        ValueError: `vocab_size` is not positive.
    """

    def __init__(self, vocab_size: int, sequences: Iterable[Sequence[int]], default_prev: int = 0) -> None:
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        self.vocab_size = int(vocab_size)
        self.default_prev = int(default_prev)
        pair_counts: dict[int, Counter] = defaultdict(Counter)
        for seq in sequences:
            for a, b in zip(seq, seq[1:]):
                pair_counts[int(a)][int(b)] += 1
        self._counts = dict(pair_counts)
        self._totals = {a: sum(c.values()) for a, c in self._counts.items()}
        self._ranked: dict[int, list[tuple[int, int]]] = {}
        self._lock = threading.Lock()

    def logprob(self, prev: int | None, token: int) -> float:
        """Log-probability of `token` following `prev`.

        Args:
            prev: the previous token id (None: `default_prev`).
            token: the token id.

        Returns:
            The natural-log probability (always < 0).
        """
        a = self.default_prev if prev is None else int(prev)
        row = self._counts.get(a)
        count = row.get(int(token), 0) if row else 0
        return math.log(count + 1) - math.log(self._totals.get(a, 0) + self.vocab_size)

    def sequence_logprobs(self, prev: int | None, tokens: Sequence[int]) -> list[float]:
        """Log-probabilities of each token of `tokens`, each conditioned on the one before.

        Args:
            prev: the token before `tokens[0]` (the last prompt token), or None.
            tokens: the emitted token ids.

        Returns:
            One log-probability per token.
        """
        out = []
        for tok in tokens:
            out.append(self.logprob(prev, tok))
            prev = tok
        return out

    def rank(self, prev: int | None, token: int) -> int:
        """The vocabulary rank of `token` after `prev` (1: most likely; ties share the better rank).

        Args:
            prev: the previous token id (None: `default_prev`).
            token: the token id.

        Returns:
            1 + the number of ids with a strictly higher log-probability.
        """
        a = self.default_prev if prev is None else int(prev)
        row = self._counts.get(a)
        count = row.get(int(token), 0) if row else 0
        return 1 + sum(1 for _, c in self._ranking(a) if c > count)

    def _ranking(self, a: int) -> list[tuple[int, int]]:
        ranked = self._ranked.get(a)
        if ranked is None:
            row = self._counts.get(a, Counter())
            ranked = sorted(row.items(), key=lambda kv: (-kv[1], kv[0]))
            with self._lock:
                self._ranked[a] = ranked
        return ranked

    def top(self, prev: int | None, k: int) -> list[tuple[int, float]]:
        """The `k` most likely next tokens after `prev` (ties broken by lower id).

        Args:
            prev: the previous token id (None: `default_prev`).
            k: how many alternatives (0 gives an empty list).

        Returns:
            `(token_id, logprob)` pairs, most likely first.
        """
        if k <= 0:
            return []
        a = self.default_prev if prev is None else int(prev)
        denom = math.log(self._totals.get(a, 0) + self.vocab_size)
        ranked = self._ranking(a)
        out = [(tok, math.log(c + 1) - denom) for tok, c in ranked[:k]]
        if len(out) < k:
            seen = {tok for tok, _ in ranked}
            unseen_lp = -denom
            tok = 0
            while len(out) < k and tok < self.vocab_size:
                if tok not in seen:
                    out.append((tok, unseen_lp))
                tok += 1
        return out


_CACHE: dict[tuple[str, int], BigramModel] = {}
_CACHE_LOCK = threading.Lock()


def bigram_for_tokenizer(tokenizer: Any, corpus_path: str | Path = CORPUS_PATH) -> BigramModel:
    """The bigram model of a tokenizer, fitted on the built-in corpus (cached).

    Args:
        tokenizer: a transformers tokenizer.
        corpus_path: the corpus to count bigrams in.

    Returns:
        The fitted `BigramModel`.

    Raises:
        FileNotFoundError: the corpus file does not exist.
    """
    key = (f"{getattr(tokenizer, 'name_or_path', '')}:{id(tokenizer)}:{corpus_path}", len(tokenizer))
    with _CACHE_LOCK:
        model = _CACHE.get(key)
        if model is None:
            path = Path(corpus_path)
            if not path.is_file():
                raise FileNotFoundError(f"bigram corpus not found: {path}")
            text = path.read_text(encoding="utf-8")
            ids = tokenizer.encode(text, add_special_tokens=False)
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            model = BigramModel(len(tokenizer), [ids], default_prev=pad)
            _CACHE[key] = model
    return model
