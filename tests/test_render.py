"""samples.md: the exact token stream with special tokens, fragment breaks, head/tail truncation."""

from __future__ import annotations

import pytest

from rollout_dataset.export import export_rollout
from support.synthetic_records import make_record, tool_manifest
from rollout_dataset.render import FRAGMENT_BREAK, render_samples, truncate_middle

TOOLS = tool_manifest("bash")
HEADER = {"rollout": "r1", "reward": 0.5, "passed": False, "stop_reason": "submit"}


@pytest.fixture(scope="module")
def tokenizer():
    from rollout_dataset.tokenizers import load_tokenizer

    return load_tokenizer("builtin")


def _call(tokenizer, index, messages, text, tools=TOOLS):
    from rollout_dataset.tokenizers import chat_prompt_ids, encode_text

    prompt = chat_prompt_ids(tokenizer, messages, tools)
    return make_record(index, prompt, encode_text(tokenizer, text + "<|im_end|>"), messages=messages,
                       response_message={"role": "assistant", "content": text}, tools=tools)


def _conversation(tokenizer, system2=None):
    m = [{"role": "system", "content": "SYSTEM ONE"}, {"role": "user", "content": "hello there"}]
    first = _call(tokenizer, 0, list(m), "first answer")
    m += [{"role": "assistant", "content": "first answer"}, {"role": "user", "content": "and again"}]
    if system2:
        m[0] = {"role": "system", "content": system2}
    second = _call(tokenizer, 1, list(m), "second answer")
    return [first, second]


def _render(tokenizer, records, **kw):
    doc = export_rollout(records, session_id="s", capture_level="tokens")
    return render_samples(doc, records, tokenizer, header=HEADER, **kw)


def test_prefix_clean_rollout_decodes_in_one_pass_with_special_tokens(tokenizer):
    records = _conversation(tokenizer)
    text = _render(tokenizer, records)
    whole = tokenizer.decode(records[1]["prompt_token_ids"] + records[1]["completion_token_ids"], skip_special_tokens=False)
    assert whole in text
    assert "<|im_start|>system\nSYSTEM ONE" in text and "<|im_start|>assistant\nfirst answer<|im_end|>" in text
    assert FRAGMENT_BREAK not in text
    assert "fragments: 1" in text


def test_header_names_rollout_reward_passed_stop_reason_calls_and_tokens(tokenizer):
    records = _conversation(tokenizer)
    doc = export_rollout(records, session_id="s", capture_level="tokens")
    text = render_samples(doc, records, tokenizer, header={**HEADER, "task": "t3"})
    n_tokens = len(records[1]["prompt_token_ids"]) + len(records[1]["completion_token_ids"])
    assert text.startswith("# Rollout r1\n")
    assert f"reward: 0.5 | passed: False | stop reason: submit | calls: 2 | fragments: 1 | tokens: {n_tokens}" in text
    assert "task: t3" in text


def test_prompt_that_does_not_extend_the_stream_gets_a_fragment_break(tokenizer):
    text = _render(tokenizer, _conversation(tokenizer, system2="SYSTEM TWO"))
    assert text.count(FRAGMENT_BREAK) == 1
    assert text.index("SYSTEM ONE") < text.index(FRAGMENT_BREAK) < text.index("SYSTEM TWO")
    assert "fragments: 2" in text


def test_auxiliary_sequence_is_rendered_as_its_own_sample(tokenizer):
    title = _call(tokenizer, 0, [{"role": "system", "content": "You are a title generator."}, {"role": "user", "content": "x"}], "A title", tools=None)
    rest = [dict(r, index=r["index"] + 1) for r in _conversation(tokenizer)]
    text = _render(tokenizer, [title] + rest)
    assert "## agent" in text and "## sequence 0: auxiliary" in text
    assert "You are a title generator." in text


def test_over_long_body_keeps_head_and_tail_with_a_cut_marker(tokenizer):
    text = _render(tokenizer, _conversation(tokenizer), max_chars=60)
    assert "characters cut from the middle" in text
    assert "<|im_start|>system" in text  # head
    assert "second answer<|im_end|>" in text  # tail


def test_truncate_middle_says_how_much_was_cut():
    out = truncate_middle("a" * 50 + "b" * 50, 20)
    assert out.startswith("a" * 10) and out.endswith("b" * 10)
    assert "[... 80 characters cut from the middle ...]" in out
    assert truncate_middle("short", 20) == "short"


def test_eval_capture_without_ids_is_rendered_from_messages_and_says_so(tokenizer):
    records = _conversation(tokenizer)
    for r in records:
        r["prompt_token_ids"] = r["completion_token_ids"] = r["per_token_logps"] = None
    doc = export_rollout(records, session_id="s", capture_level="text")
    text = render_samples(doc, records, tokenizer, header=HEADER)
    assert "no token ids captured" in text
    assert "second answer" in text
