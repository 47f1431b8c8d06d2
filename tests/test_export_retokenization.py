"""Retokenization skew: the request re-rendered through the chat template vs the server's prompt ids."""

from __future__ import annotations

import pytest

from rollout_dataset.export import export_rollout, render_prompt_ids
from support.synthetic_records import make_record, tool_manifest
from rollout_dataset.graph import build_graph

TOOLS = tool_manifest("bash")


@pytest.fixture(scope="module")
def tokenizer():
    from rollout_dataset.tokenizers import load_tokenizer

    return load_tokenizer("builtin")


def _record(tokenizer, index=0):
    from rollout_dataset.tokenizers import chat_prompt_ids, encode_text

    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]
    prompt = chat_prompt_ids(tokenizer, messages, TOOLS)
    return make_record(index, prompt, encode_text(tokenizer, "done<|im_end|>"), messages=messages, tools=TOOLS)


def _skew(doc):
    return [f for f in doc["findings"] if f["code"] == "retokenization_skew"]


def test_rerendered_request_equal_to_server_ids_raises_no_skew(tokenizer):
    record = _record(tokenizer)
    assert render_prompt_ids(build_graph([record]).get(0), tokenizer) == record["prompt_token_ids"]
    doc = export_rollout([record], session_id="s", capture_level="tokens", tokenizer=tokenizer)
    assert _skew(doc) == []


def test_skew_reports_the_first_differing_position_and_keeps_the_server_ids(tokenizer):
    record = _record(tokenizer)
    server_ids = list(record["prompt_token_ids"])
    server_ids[5] = (server_ids[5] + 1) % len(tokenizer)
    record["prompt_token_ids"] = server_ids
    record["usage"]["prompt_tokens"] = len(server_ids)
    doc = export_rollout([record], session_id="s", capture_level="tokens", tokenizer=tokenizer)
    (finding,) = _skew(doc)
    assert (finding["level"], finding["position"], finding["call_index"]) == ("WARN", 5, 0)
    assert "server's ids are kept" in finding["message"]
    assert doc["sequences"][0]["input_ids"][: len(server_ids)] == server_ids
    assert doc["sequences"][0]["trainable"] is True


def test_skew_is_not_checked_without_a_tokenizer(tokenizer):
    record = _record(tokenizer)
    record["prompt_token_ids"] = record["prompt_token_ids"][:-1]
    record["usage"]["prompt_tokens"] -= 1
    doc = export_rollout([record], session_id="s", capture_level="tokens")
    assert _skew(doc) == []


@pytest.mark.parametrize("case", ["no_description", "odd_key_order", "extra_keys"])
def test_tools_are_rerendered_as_vllm_renders_them_so_an_unusual_tool_raises_no_skew(tokenizer, case):
    """Ids recorded from genuine vLLM 0.32 (tests/data/real_vllm_tool_render.json): a tool without a
    description, with its keys in another order or with extra keys renders as vLLM's request model
    dumps it, not as sent."""
    import json
    from pathlib import Path

    from tool_render_cases import TOKENIZE_CASES

    from rollout_dataset.tokenizers import encode_text

    genuine = json.loads((Path(__file__).parent / "data" / "real_vllm_tool_render.json").read_text())
    request = TOKENIZE_CASES[case]
    prompt = genuine["chat_prompt_token_ids"][case]
    record = make_record(0, prompt, encode_text(tokenizer, "done<|im_end|>"), messages=request["messages"],
                         tools=request["tools"])
    assert render_prompt_ids(build_graph([record]).get(0), tokenizer) == prompt
    doc = export_rollout([record], session_id="s", capture_level="tokens", tokenizer=tokenizer)
    assert _skew(doc) == []
