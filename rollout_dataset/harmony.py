"""gpt-oss Harmony for the local backend: the o200k_harmony tokenizer and vLLM 0.32's prompt render.

`rollout-dataset serve --tokenizer harmony` serves a gpt-oss-style model the way vLLM 0.32 does for a
model whose type is `gpt_oss`: the chat prompt is rendered by `openai_harmony` (not a Jinja
template), read in `vllm/renderers/online_renderer.py` (`_make_request_with_harmony`) and
`vllm/entrypoints/openai/parser/harmony_utils.py`:

- a leading system/developer message becomes the developer message's instructions; the system
  message is always `SystemContent` with the conversation start date (today, as vLLM's default)
  and the request's `reasoning_effort` (`low`/`medium`/`high`; `none` and others are refused);
  the developer message is added when there are instructions or tools (tools as function
  descriptions);
- an assistant message with tool calls: its content as a commentary message, its `reasoning` as an
  analysis message, each call a commentary message to `functions.NAME` with content type `json`
  (arguments as the string sent); without tool calls: `reasoning` as analysis, content as final;
- a tool message comes from `functions.NAME` (the name of the call its `tool_call_id` answers) on
  commentary to `assistant`;
- analysis messages before the last final assistant message are dropped, then the conversation is
  rendered for completion (`<|start|>assistant` last) with the library's own dropping switched off.

vLLM 0.32 ships `oss-harmony` 0.0.11 and rewrites each earlier assistant tool-call header back to
`assistant to=functions.NAME<|channel|>commentary json` (`_use_legacy_tool_call_headers`);
`openai-harmony` 0.0.8, used here, renders that header already (the ids are equal). A tool result's
header differs between the two libraries: 0.0.11 writes `functions.NAME<|channel|>commentary
to=assistant`, 0.0.8 `functions.NAME to=assistant<|channel|>commentary`; it is rewritten here to
vLLM's form (`_tool_result_headers`). The renders were compared id for id with a genuine vLLM 0.32
CPU server serving a tiny `gpt_oss` model (`tests/test_real_vllm_harmony.py`, docs/backend.md).

The tokenizer is an adapter over the genuine encoding (`openai_harmony` encodes; decoding reads the
o200k byte table, so an incomplete UTF-8 character decodes to U+FFFD as a byte-level BPE does). The
o200k vocabulary comes from `TIKTOKEN_ENCODINGS_BASE` when it holds `o200k_base.tiktoken`, else it is
rebuilt from the PyPI package `quicktok-v1` (checked against tiktoken's sha256), because
`openai_harmony` would otherwise download it.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import struct
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from rollout_dataset.wire.content import text_parts

__all__ = [
    "harmony_prompt_messages",
    "HARMONY_TOKENIZER",
    "HARMONY_INSTALL",
    "HarmonyTokenizer",
    "load_harmony_tokenizer",
    "o200k_tiktoken_bytes",
    "o200k_encodings_dir",
    "harmony_encoding",
    "harmony_prompt_ids",
    "REASONING_EFFORTS",
]

#: the `--tokenizer` value that selects Harmony (vLLM selects it from the model type `gpt_oss`)
HARMONY_TOKENIZER = "harmony"
#: what a user installs to serve Harmony
HARMONY_INSTALL = "pip install 'rollout-dataset[harmony]'"
#: tiktoken's expected sha256 of o200k_base.tiktoken (tiktoken_ext.openai_public.o200k_base)
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_FILE_NAME = "o200k_base.tiktoken"
#: the `reasoning_effort` values Harmony's system message takes
REASONING_EFFORTS = ("low", "medium", "high")


def o200k_tiktoken_bytes() -> bytes:
    """o200k_base.tiktoken rebuilt from quicktok's shipped vocabulary, verified against tiktoken's sha256.

    Returns:
        The file's bytes (base64 token, space, rank; one a line).

    Raises:
        ImportError: `quicktok-v1` is not installed.
        ValueError: the rebuilt file does not match tiktoken's published hash.
    """
    from importlib.resources import files

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
    """Write o200k_base.tiktoken into `folder` (once, atomically) and return the folder.

    Args:
        folder: where to write it.

    Returns:
        `folder`, for `TIKTOKEN_ENCODINGS_BASE`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / O200K_FILE_NAME
    if not path.exists():
        tmp = path.with_name(f"{O200K_FILE_NAME}.{os.getpid()}.tmp")
        tmp.write_bytes(o200k_tiktoken_bytes())
        tmp.replace(path)
    return folder


def _vocab_dir(cache_dir: str | None) -> Path:
    configured = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if cache_dir is None and configured and (Path(configured) / O200K_FILE_NAME).is_file():
        return Path(configured)
    folder = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "rollout-dataset-o200k"
    return o200k_encodings_dir(folder)


@lru_cache(maxsize=1)
def harmony_encoding(cache_dir: str | None = None) -> Any:
    """The genuine gpt-oss Harmony encoding (`openai_harmony`), loaded offline.

    Sets `TIKTOKEN_ENCODINGS_BASE` (the only way `openai_harmony` takes a local vocabulary).

    Args:
        cache_dir: where to write o200k_base.tiktoken; default `TIKTOKEN_ENCODINGS_BASE` when it holds
            the file, else a folder under the system temp dir.

    Returns:
        `openai_harmony.HarmonyEncoding` for `HARMONY_GPT_OSS`.

    Raises:
        ImportError: `openai-harmony` or `quicktok-v1` is missing (the message names the install command).
    """
    try:
        folder = _vocab_dir(cache_dir)
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(folder)
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    except ImportError as exc:
        raise ImportError(f"serving Harmony needs openai-harmony and quicktok-v1 ({exc.name} is missing): "
                          f"{HARMONY_INSTALL}") from exc
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


@lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return bytes_to_unicode()


class HarmonyTokenizer:
    """o200k_harmony as the backend's tokenizer (the subset of a transformers tokenizer it uses).

    `encode` is the genuine encoding's (special-token text maps to its id); `decode` joins each id's
    bytes (special tokens as their names) and replaces an incomplete UTF-8 tail with U+FFFD;
    `convert_ids_to_tokens` gives byte-level strings as gpt-oss's Hugging Face tokenizer does.
    `apply_chat_template` renders Harmony (`harmony_prompt_ids`) so code written for a chat template
    works too. The eos is `<|return|>`; `<|call|>` also ends a reply (`stop_token_ids`).
    """

    name_or_path = HARMONY_TOKENIZER

    def __init__(self, encoding: Any | None = None, start_date: str | None = None) -> None:
        self.encoding = encoding if encoding is not None else harmony_encoding()
        self.start_date = start_date
        folder = Path(os.environ["TIKTOKEN_ENCODINGS_BASE"])
        table: dict[int, bytes] = {}
        for line in (folder / O200K_FILE_NAME).read_bytes().splitlines():
            if line:
                token, rank = line.split()
                table[int(rank)] = base64.b64decode(token)
        for name in self.encoding.special_tokens_set:
            (tid,) = self.encoding.encode(name, allowed_special="all")
            table[tid] = name.encode()
        self._bytes = table
        self._special = frozenset(self.encoding.special_tokens_set)
        self._size = max(table) + 1
        self.eos_token_id = self.token_id("<|return|>")
        self.pad_token_id = self.token_id("<|endoftext|>")
        self.stop_token_ids = (self.token_id("<|call|>"),)
        self._vocab_cache: dict[str, int] | None = None

    def token_id(self, name: str) -> int:
        """Args: name: a special token such as `<|call|>`. Returns: its id."""
        (tid,) = self.encoding.encode(name, allowed_special="all")
        return int(tid)

    def __len__(self) -> int:
        return self._size

    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        """Args: text: the text (special-token names encode to their ids). Returns: the ids."""
        return list(self.encoding.encode(text, allowed_special="all"))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False, **_: Any) -> str:
        """Args: ids: token ids (unknown ids decode to nothing). skip_special_tokens: drop special
        tokens. Returns: the text, an incomplete UTF-8 character as U+FFFD."""
        parts = []
        for t in ids:
            raw = self._bytes.get(int(t))
            if raw is None or (skip_special_tokens and raw.decode("latin-1") in self._special):
                continue
            parts.append(raw)
        return b"".join(parts).decode("utf-8", errors="replace")

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        """Args: ids: token ids. Returns: byte-level token strings (special tokens as their names)."""
        table = _byte_to_unicode()
        out = []
        for t in ids:
            raw = self._bytes.get(int(t), b"")
            text = raw.decode("latin-1")
            out.append(text if text in self._special else "".join(table[b] for b in raw))
        return out

    @property
    def unk_token_id(self) -> None:
        """Returns: None (byte-level: every text encodes)."""
        return None

    @property
    def all_special_ids(self) -> list[int]:
        """Returns: the ids of Harmony's special tokens."""
        return sorted(self.token_id(name) for name in self._special)

    @property
    def added_tokens_decoder(self) -> dict[int, str]:
        """Returns: special token id -> name (as a transformers tokenizer's added tokens)."""
        return {self.token_id(name): name for name in self._special}

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> Any:
        """Args: tokens: a token string (byte-level, or a special token's name) or a list of them.
        Returns: the id (None for an unknown one), or a list of them."""
        vocab = self._vocab()
        if isinstance(tokens, str):
            return vocab.get(tokens)
        return [vocab.get(t) for t in tokens]

    def batch_decode(self, sequences: Sequence[Sequence[int]], **kwargs: Any) -> list[str]:
        """Args: sequences: id lists. **kwargs: as `decode`. Returns: one text each."""
        return [self.decode(ids, **kwargs) for ids in sequences]

    def _vocab(self) -> dict[str, int]:
        if self._vocab_cache is None:
            self._vocab_cache = self.get_vocab()
        return self._vocab_cache

    def get_vocab(self) -> dict[str, int]:
        """Returns: token string -> id (byte-level strings, as `convert_ids_to_tokens`)."""
        ids = sorted(self._bytes)
        return dict(zip(self.convert_ids_to_tokens(ids), ids))

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], tools: Any = None,
                            add_generation_prompt: bool = True, tokenize: bool = True, **kwargs: Any) -> Any:
        """The Harmony render of `messages` (ids, or text with `tokenize=False`).

        Args:
            messages: chat messages. tools: tool definitions. add_generation_prompt: ignored (Harmony
            always ends with `<|start|>assistant`). tokenize: ids (True) or text. **kwargs:
            `reasoning_effort` is read.

        Returns:
            The ids or their text.
        """
        ids = harmony_prompt_ids(self.encoding, messages, tools, kwargs.get("reasoning_effort"), self.start_date)
        return ids if tokenize else self.decode(ids)


def load_harmony_tokenizer(start_date: str | None = None) -> HarmonyTokenizer:
    """Args: start_date: the system message's `Current date` (YYYY-MM-DD; None: today, as vLLM).
    Returns: the tokenizer. Raises: ImportError: openai-harmony or quicktok-v1 missing."""
    return HarmonyTokenizer(harmony_encoding(), start_date)


def _text(content: Any) -> str | None:
    """A message's text (vLLM's `flatten_input_text_content`): None when there is none."""
    if content is None or isinstance(content, str):
        return content
    texts = text_parts(content)
    return "".join(texts) if texts else None


def _reasoning(message: Mapping[str, Any]) -> Any:
    # the chat endpoint renames reasoning_content to reasoning before rendering (docs/backend.md)
    return message.get("reasoning") or message.get("reasoning_content")


def _chat_to_harmony(message: Mapping[str, Any], names: Mapping[Any, str]) -> list[Any]:
    from openai_harmony import Author, Message, Role, TextContent

    role = message.get("role")
    calls = message.get("tool_calls") or []
    out: list[Any] = []
    if role == "assistant" and calls:
        content = _text(message.get("content"))
        if content:
            out.append(Message.from_role_and_content(Role.ASSISTANT, content).with_channel("commentary"))
        if _reasoning(message):
            out.append(Message.from_role_and_content(Role.ASSISTANT, _reasoning(message)).with_channel("analysis"))
        for call in calls:
            fn = call.get("function") or {} if isinstance(call, Mapping) else {}
            arguments = fn.get("arguments", "") or ""
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            out.append(Message.from_role_and_content(Role.ASSISTANT, arguments).with_channel("commentary")
                       .with_recipient(f"functions.{fn.get('name', '')}").with_content_type("json"))
        return out
    if role == "tool":
        name = names.get(message.get("tool_call_id", ""), "")
        author = Author.new(Role.TOOL, f"functions.{name}")
        return [Message.from_author_and_content(author, _text(message.get("content")) or "")
                .with_channel("commentary").with_recipient("assistant")]
    if role == "assistant":
        if _reasoning(message):
            out.append(Message.from_role_and_content(Role.ASSISTANT, _reasoning(message)).with_channel("analysis"))
        content = _text(message.get("content"))
        if content:
            out.append(Message.from_role_and_content(Role.ASSISTANT, content).with_channel("final"))
        return out
    if role in ("system", "developer"):
        instructions = _text(message.get("content"))
        return [] if instructions is None else [_developer(instructions, None)]
    raw = message.get("content")
    parts = raw if isinstance(raw, list) else [{"text": raw or ""}]
    contents = [TextContent(text=p.get("text", "") if isinstance(p, dict) else str(p)) for p in parts]
    return [Message.from_role_and_contents(Role(role), contents)]


def _developer(instructions: str | None, tools: Sequence[Mapping[str, Any]] | None) -> Any:
    from openai_harmony import DeveloperContent, Message, Role, ToolDescription

    content = DeveloperContent.new()
    if instructions is not None:
        content = content.with_instructions(instructions)
    functions = [t.get("function", t) for t in tools or [] if t.get("type", "function") == "function"]
    if functions:
        content = content.with_function_tools([
            ToolDescription.new(name=f.get("name", ""), description=f.get("description") or "",
                                parameters=f.get("parameters")) for f in functions])
    return Message.from_role_and_content(Role.DEVELOPER, content)


def harmony_prompt_ids(encoding: Any, messages: Sequence[Mapping[str, Any]],
                       tools: Sequence[Mapping[str, Any]] | None = None, reasoning_effort: str | None = None,
                       start_date: str | None = None) -> list[int]:
    """The prompt ids vLLM 0.32 renders for a gpt-oss chat request (see the module docstring).

    Args:
        encoding: the Harmony encoding.
        messages: the request's chat messages.
        tools: the request's tools (None: no developer tool list, as with `tool_choice: none`).
        reasoning_effort: `low`, `medium`, `high` or None.
        start_date: the system message's date (YYYY-MM-DD); None: today.

    Returns:
        The ids, ending with `<|start|>assistant`.

    Raises:
        ValueError: `reasoning_effort` is not one Harmony takes, or a role Harmony has no place for.
    """
    from openai_harmony import Conversation, RenderConversationConfig, Role

    kept = harmony_prompt_messages(messages, tools, reasoning_effort, start_date)
    ids = encoding.render_conversation_for_completion(
        Conversation.from_messages(kept), Role.ASSISTANT, config=RenderConversationConfig(auto_drop_analysis=False))
    return _tool_result_headers(encoding, list(ids))


def harmony_prompt_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
                            reasoning_effort: str | None = None, start_date: str | None = None) -> list[Any]:
    """The Harmony messages `harmony_prompt_ids` renders (vLLM's `input_messages` on `/v1/responses`).

    Args:
        messages: the request's chat messages.
        tools: the request's tools (None: no developer tool list, as with `tool_choice: none`).
        reasoning_effort: `low`, `medium`, `high` or None.
        start_date: the system message's date (YYYY-MM-DD); None: today.

    Returns:
        The `openai_harmony.Message` list: system, developer (instructions and tools), the
        conversation without the analysis before its last final answer.

    Raises:
        ValueError: `reasoning_effort` is not one Harmony takes, or a role Harmony has no place for.
    """
    from openai_harmony import Message, ReasoningEffort, Role, SystemContent

    if reasoning_effort is not None and reasoning_effort not in REASONING_EFFORTS:
        raise ValueError(f"reasoning_effort={reasoning_effort!r} is not supported by Harmony; "
                         f"choose from {', '.join(REASONING_EFFORTS)}")
    chat = list(messages)
    instructions = None
    if chat and chat[0].get("role") in ("system", "developer"):
        instructions, chat = _text(chat[0].get("content")), chat[1:]
    system = SystemContent.new()
    if reasoning_effort is not None:
        system = system.with_reasoning_effort(ReasoningEffort(reasoning_effort.capitalize()))
    date = start_date or datetime.date.today().isoformat()
    harmony = [Message.from_role_and_content(Role.SYSTEM, system.with_conversation_start_date(date))]
    if instructions or tools:
        harmony.append(_developer(instructions, tools))
    names: dict[Any, str] = {call.get("id"): str((call.get("function") or {}).get("name") or "")
                             for m in chat for call in (m.get("tool_calls") or []) if isinstance(call, Mapping)}
    for message in chat:
        try:
            harmony.extend(_chat_to_harmony(message, names))
        except ValueError as exc:
            raise ValueError(f"Harmony has no place for message role {message.get('role')!r}: {exc}") from None
    last_final = max((i for i, m in enumerate(harmony) if m.author.role == Role.ASSISTANT and m.channel == "final"),
                     default=-1)
    return [m for i, m in enumerate(harmony) if not (i < last_final and m.channel == "analysis")]


def _tool_result_headers(encoding: Any, ids: list[int]) -> list[int]:
    """Tool results' headers as vLLM 0.32 (`oss-harmony` 0.0.11) renders them.

    `openai-harmony` 0.0.8 writes ``<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>``;
    vLLM 0.32 sends ``<|start|>functions.NAME<|channel|>commentary to=assistant<|message|>`` (seen on
    its server, same ids as encoding each piece alone). Assistant headers are left alone: vLLM
    rewrites its own to the 0.0.8 form.
    """
    start, channel, message = (encoding.encode(t, allowed_special="all")[0]
                               for t in ("<|start|>", "<|channel|>", "<|message|>"))
    out: list[int] = []
    i = 0
    while i < len(ids):
        if ids[i] != start or message not in ids[i + 1:]:
            out.append(ids[i])
            i += 1
            continue
        end = ids.index(message, i + 1)
        header = ids[i + 1:end]
        if channel in header:
            cut = header.index(channel)
            author_part, channel_name = encoding.decode(header[:cut]), encoding.decode(header[cut + 1:])
            author, _, recipient = author_part.partition(" to=")
            if recipient and author != "assistant" and " " not in channel_name:
                header = (encoding.encode(author) + [channel]
                          + encoding.encode(f"{channel_name} to={recipient}"))
        out += [start] + list(header) + [message]
        i = end + 1
    return out
