"""Loading tokenizers and turning chat requests into prompt token ids.

The toolkit every layer shares (export, render, builder and the local backend alike): it depends
on no server. `load_tokenizer("builtin")` loads the byte-level BPE shipped in
`rollout_dataset/tokenizer_data/` (trained by `python -m rollout_dataset.backend.train_tokenizer`);
`load_tokenizer("harmony")` gpt-oss's o200k_harmony (`rollout_dataset.harmony`: chat prompts rendered
by `openai-harmony`, as vLLM renders them for gpt-oss); any other value is a local folder
or a Hugging Face Hub id, loaded with `transformers.AutoTokenizer` (a Hub id is only fetched if the
Hub is reachable and allowed; nothing here downloads by itself at import time).

Prompt ids are what vLLM computes for a chat request: the chat template rendered with
`add_generation_prompt=True` (plus the request's `chat_template_kwargs`), then encoded without adding
special tokens.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["BUILTIN_TOKENIZER_DIR", "load_tokenizer", "render_chat", "chat_prompt_ids", "encode_text", "template_messages", "template_conversation",
           "common_prefix"]

logger = logging.getLogger(__name__)

BUILTIN_TOKENIZER_DIR = Path(__file__).resolve().parent / "tokenizer_data"


@functools.lru_cache(maxsize=8)
def _load(spec: str) -> Any:  # a transformers tokenizer (its classes are not typed for mypy)
    from transformers import AutoTokenizer

    if spec == "harmony":
        from rollout_dataset.harmony import load_harmony_tokenizer

        return load_harmony_tokenizer()
    if spec == "builtin":
        path = BUILTIN_TOKENIZER_DIR
        if not (path / "tokenizer.json").is_file():
            raise FileNotFoundError(
                f"built-in tokenizer missing at {path}; rebuild it with "
                "`python -m rollout_dataset.backend.train_tokenizer`"
            )
        return AutoTokenizer.from_pretrained(str(path))
    local = Path(spec).expanduser()
    if local.exists():
        if not local.is_dir():
            raise FileNotFoundError(f"tokenizer path {local} is not a folder with tokenizer files")
        return AutoTokenizer.from_pretrained(str(local))
    if spec.startswith(("/", "./", "../", "~")):  # a path, not a Hub id: name it rather than the Hub's id rules
        raise FileNotFoundError(f"tokenizer path {local}: no such folder")
    logger.info("loading tokenizer %s from the Hugging Face Hub", spec)
    return AutoTokenizer.from_pretrained(spec)


def load_tokenizer(spec: str | Path = "builtin") -> Any:
    """Load a tokenizer (cached per spec).

    Args:
        spec: `"builtin"`, `"harmony"`, a folder holding tokenizer files, or a Hub id such as `Qwen/Qwen2.5-0.5B`.

    Returns:
        A `transformers` tokenizer with a chat template (for `"harmony"`, `rollout_dataset.harmony.HarmonyTokenizer`).

    Raises:
        ImportError: `"harmony"` without openai-harmony / quicktok-v1 (the message names the install command).
        FileNotFoundError: the built-in files are missing or the path is not a folder.
        OSError: transformers could not load the folder or Hub id.
    """
    return _load(str(spec))


def render_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """Render a conversation with the tokenizer's chat template.

    Args:
        tokenizer: a tokenizer from `load_tokenizer`.
        messages: OpenAI-style chat messages.
        tools: OpenAI-style tool definitions, or None.
        add_generation_prompt: append the assistant header.
        chat_template_kwargs: extra template variables (e.g. `{"enable_thinking": False}`).

    Returns:
        The prompt text.

    Raises:
        ValueError: the template could not render these messages.
    """
    kwargs = dict(chat_template_kwargs or {})
    try:
        return tokenizer.apply_chat_template(
            template_messages(messages),
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **kwargs,
        )
    except Exception as exc:  # jinja errors, bad message shapes
        raise ValueError(f"chat template could not render the messages: {exc}") from exc


def template_conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as vLLM 0.32 builds its conversation from them: a tool message whose content is
    a list of text parts becomes their texts joined by a newline (a list holding other parts is kept).

    Args:
        messages: the request's messages (not modified).

    Returns:
        The messages the template renders.
    """
    out = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, list) and all(
                isinstance(p, dict) and p.get("type") == "text" for p in content):
            message = {**message, "content": "\n".join(str(p.get("text", "")) for p in content)}
        out.append(message)
    return out


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as vLLM hands them to the chat template.

    vLLM parses each assistant tool call's `arguments` JSON string into an object before rendering
    (an empty one becomes `{}`), so the template re-serialises the arguments itself: a harness that
    re-encodes them (opencode's `JSON.stringify` drops the spaces) still gets the same prompt ids.
    Arguments that are not valid JSON are left as the string they are.

    Args:
        messages: OpenAI-style chat messages (not modified).

    Returns:
        Copies of the messages, tool-call arguments parsed and a tool message's text parts joined
        (`template_conversation`).
    """
    out = []
    for message in template_conversation([dict(m) for m in messages]):
        message = dict(message)
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and isinstance(calls, list):
            parsed = []
            for call in calls:
                call = dict(call) if isinstance(call, Mapping) else call
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, Mapping):
                    function = dict(function)
                    arguments = function.get("arguments")
                    if not arguments:
                        function["arguments"] = {}
                    elif isinstance(arguments, str):
                        try:
                            function["arguments"] = json.loads(arguments)
                        except ValueError:
                            pass
                    call["function"] = function
                parsed.append(call)
            message["tool_calls"] = parsed
        out.append(message)
    return out


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Encode text without adding special tokens (special-token strings map to their ids).

    Args:
        tokenizer: a tokenizer from `load_tokenizer`.
        text: the text.

    Returns:
        The token ids.
    """
    return list(tokenizer.encode(text, add_special_tokens=False))


def chat_prompt_ids(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """The prompt token ids of a chat request, as vLLM computes them.

    Args:
        tokenizer: a tokenizer from `load_tokenizer`.
        messages: OpenAI-style chat messages.
        tools: OpenAI-style tool definitions, or None.
        chat_template_kwargs: extra template variables.

    Returns:
        `encode(apply_chat_template(messages, tools=..., add_generation_prompt=True, **kwargs))`.

    Raises:
        ValueError: the template could not render these messages.
    """
    return encode_text(tokenizer, render_chat(tokenizer, messages, tools, True, chat_template_kwargs))


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The length of the common prefix of two sequences (token ids, rendered messages).

    Args:
        a: one sequence.
        b: the other.

    Returns:
        How many leading items are equal.
    """
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
