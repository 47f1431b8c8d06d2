"""Train the built-in tokenizer, reproducibly, from the corpus shipped with the package.

Run `python -m rollout_dataset.backend.train_tokenizer` to rebuild
`rollout_dataset/tokenizer_data/` (tokenizer.json, tokenizer_config.json, chat template), or
`python -m rollout_dataset.backend.train_tokenizer --check` to train into a temporary folder and
verify that the result equals the shipped files (exit code 1 if not).

The tokenizer is a byte-level BPE (Hugging Face `tokenizers`) with a vocabulary of at most
`VOCAB_SIZE` entries, trained on `tokenizer_data/corpus.txt` (written for the project, so it is the same
on every machine), with the special tokens of `rollout_dataset.backend.template.SPECIAL_TOKENS`
at ids 0-8, and wrapped as a transformers `PreTrainedTokenizerFast` carrying the ChatML/hermes chat
template.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from rollout_dataset.backend.template import (
    CHAT_TEMPLATE,
    CONTROL_TOKENS,
    EOS_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
)
from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR

if TYPE_CHECKING:  # transformers is imported on first use
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

__all__ = [
    "VOCAB_SIZE",
    "TOKENIZER_DIR",
    "CORPUS_PATH",
    "train_tokenizer",
    "save_tokenizer",
    "shipped_files_match",
    "main",
]

logger = logging.getLogger(__name__)

VOCAB_SIZE = 4096
TOKENIZER_DIR = BUILTIN_TOKENIZER_DIR
CORPUS_PATH = TOKENIZER_DIR / "corpus.txt"
# files whose content defines the tokenizer (compared by --check)
_DEFINING_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _training_texts(corpus: str) -> list[str]:
    """Split the corpus into paragraphs, with special-token strings removed (they are never merged)."""
    pattern = "|".join(re.escape(t) for t in SPECIAL_TOKENS)
    cleaned = re.sub(pattern, "\n", corpus)
    return [p for p in cleaned.split("\n\n") if p.strip()]


def train_tokenizer(corpus_path: str | Path = CORPUS_PATH, vocab_size: int = VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Train the byte-level BPE and wrap it with its chat template.

    Args:
        corpus_path: the UTF-8 text file to train on.
        vocab_size: the largest vocabulary size (special tokens and the 256 bytes included).

    Returns:
        A `transformers.PreTrainedTokenizerFast`.

    Raises:
        FileNotFoundError: the corpus file does not exist.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path = Path(corpus_path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer corpus not found: {path}")
    texts = _training_texts(path.read_text(encoding="utf-8"))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    # Tag tokens (<tool_call>, <think>, ...) stay unsplittable but are not "special": decoded text
    # keeps them, as in Qwen-style tokenizers, so a tool parser can see them.
    spec = json.loads(tok.to_str())
    for entry in spec["added_tokens"]:
        entry["special"] = entry["content"] in CONTROL_TOKENS
    tok = Tokenizer.from_str(json.dumps(spec))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def save_tokenizer(tokenizer: PreTrainedTokenizerBase, out_dir: str | Path) -> Path:
    """Save a trained tokenizer (transformers layout) into `out_dir`.

    Args:
        tokenizer: the tokenizer `train_tokenizer` returned.
        out_dir: the folder to write (created if needed).

    Returns:
        The folder path.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out))
    # name a class every transformers version knows (v5 writes its internal "TokenizersBackend")
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def _canonical(path: Path) -> object:
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else text


def shipped_files_match(trained_dir: str | Path, shipped_dir: str | Path = TOKENIZER_DIR) -> list[str]:
    """Compare a freshly trained tokenizer folder with the shipped one.

    Args:
        trained_dir: the folder `save_tokenizer` wrote.
        shipped_dir: the folder shipped with the package.

    Returns:
        The names of defining files that differ or are missing (empty when they all match).
    """
    differing = []
    for name in _DEFINING_FILES:
        a, b = Path(trained_dir) / name, Path(shipped_dir) / name
        if not a.is_file() or not b.is_file() or _canonical(a) != _canonical(b):
            differing.append(name)
    return differing


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: rebuild the shipped tokenizer, or check it with `--check`.

    Args:
        argv: command-line arguments (defaults to `sys.argv[1:]`).

    Returns:
        0 on success, 1 when `--check` finds a difference.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(TOKENIZER_DIR), help="output folder (default: the shipped one)")
    parser.add_argument("--corpus", default=str(CORPUS_PATH), help="training corpus (UTF-8 text)")
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    parser.add_argument("--check", action="store_true", help="train to a temp folder and compare with --out")
    args = parser.parse_args(argv)
    tokenizer = train_tokenizer(args.corpus, args.vocab_size)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            save_tokenizer(tokenizer, tmp)
            differing = shipped_files_match(tmp, args.out)
        if differing:
            print(f"tokenizer in {args.out} differs from a fresh training run: {', '.join(differing)}")
            return 1
        print(f"tokenizer in {args.out} matches a fresh training run ({len(tokenizer)} tokens)")
        return 0
    out = save_tokenizer(tokenizer, args.out)
    print(f"saved tokenizer with {len(tokenizer)} tokens to {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
