"""Token generation, the bigram logprob model and hermes tool-call parsing."""

from __future__ import annotations

import json
import math

import pytest

from rollout_dataset.backend import BigramModel, bigram_for_tokenizer, parse_tool_calls
from rollout_dataset.tokenizers import encode_text
from rollout_dataset.backend.engine import generate
from rollout_dataset.backend.hermes import StreamingToolParser
from rollout_dataset.backend.template import render_assistant_text


def test_bigram_logprob_is_add_one_smoothed_counts():
    model = BigramModel(10, [[1, 2, 1, 2, 1, 3]])
    # after 1: (1,2) twice, (1,3) once -> count(1) = 3
    assert math.isclose(model.logprob(1, 2), math.log(3 / 13))
    assert math.isclose(model.logprob(1, 3), math.log(2 / 13))
    assert math.isclose(model.logprob(1, 7), math.log(1 / 13))
    assert math.isclose(model.logprob(9, 0), math.log(1 / 10))


def test_bigram_top_ranks_by_count_then_lowest_id():
    model = BigramModel(10, [[1, 2, 1, 2, 1, 3]])
    assert [t for t, _ in model.top(1, 4)] == [2, 3, 0, 1]
    assert sum(math.exp(model.logprob(1, t)) for t in range(10)) == pytest.approx(1.0)


def test_builtin_bigram_is_a_distribution(builtin_tokenizer):
    model = bigram_for_tokenizer(builtin_tokenizer)
    prev = encode_text(builtin_tokenizer, "def")[0]
    total = sum(math.exp(model.logprob(prev, t)) for t in range(len(builtin_tokenizer)))
    assert math.isclose(total, 1.0, rel_tol=1e-9)


def test_generation_appends_eos_and_scores_each_token_given_the_previous(builtin_tokenizer):
    model = bigram_for_tokenizer(builtin_tokenizer)
    prompt = encode_text(builtin_tokenizer, "<|im_start|>assistant\n")
    gen = generate(builtin_tokenizer, model, prompt, "Hello there.")
    assert gen.token_ids[-1] == builtin_tokenizer.eos_token_id
    assert gen.text == "Hello there." and gen.finish_reason == "stop"
    prev = [prompt[-1]] + gen.token_ids[:-1]
    assert gen.logprobs == [model.logprob(p, t) for p, t in zip(prev, gen.token_ids)]


def test_max_tokens_cuts_the_output_with_finish_reason_length(builtin_tokenizer):
    model = bigram_for_tokenizer(builtin_tokenizer)
    full = generate(builtin_tokenizer, model, [0], "one two three four five")
    gen = generate(builtin_tokenizer, model, [0], "one two three four five", max_tokens=3)
    assert gen.finish_reason == "length" and gen.token_ids == full.token_ids[:3]
    assert gen.text == builtin_tokenizer.decode(gen.token_ids)


def test_stop_string_ends_the_output_and_is_not_in_the_text(builtin_tokenizer):
    model = bigram_for_tokenizer(builtin_tokenizer)
    gen = generate(builtin_tokenizer, model, [0], "alpha beta gamma", stop=[" beta"])
    assert gen.text == "alpha" and gen.finish_reason == "stop" and gen.stop_reason == " beta"
    assert builtin_tokenizer.eos_token_id not in gen.token_ids
    assert " beta" in builtin_tokenizer.decode(gen.token_ids)
    kept = generate(builtin_tokenizer, model, [0], "alpha beta gamma", stop=[" beta"], include_stop_str_in_output=True)
    assert kept.text == "alpha beta"


def test_incomplete_utf8_bytes_are_held_back_until_the_character_is_complete(builtin_tokenizer):
    model = bigram_for_tokenizer(builtin_tokenizer)
    gen = generate(builtin_tokenizer, model, [0], "✓✓")
    assert "".join(s.delta for s in gen.steps) == "✓✓"
    assert all("\ufffd" not in s.delta for s in gen.steps)


def test_tool_calls_parse_like_vllms_hermes_parser():
    text = render_assistant_text("Let me look.", [{"name": "bash", "arguments": {"command": "ls"}},
                                                  {"name": "read", "arguments": {"path": "é.txt"}}])
    parsed = parse_tool_calls(text)
    assert parsed.content == "Let me look.\n"
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["bash", "read"]
    assert parsed.tool_calls[1]["function"]["arguments"] == '{"path": "é.txt"}'
    assert all(c["id"].startswith("chatcmpl-tool-") and c["type"] == "function" for c in parsed.tool_calls)


def test_unparseable_tool_call_stays_content():
    parsed = parse_tool_calls("<tool_call>\n{not json\n</tool_call>")
    assert parsed.tool_calls == [] and parsed.content == "<tool_call>\n{not json\n</tool_call>"


def test_streaming_parser_sends_content_then_name_then_argument_fragments(builtin_tokenizer):
    text = render_assistant_text("Ok", [{"name": "bash", "arguments": {"command": "ls -la"}}])
    ids = encode_text(builtin_tokenizer, text)
    parser = StreamingToolParser()
    deltas = []
    for i in range(1, len(ids) + 1):
        d = parser.update(builtin_tokenizer.decode(ids[:i]))
        if d:
            deltas.append(d)
    content = "".join(d.get("content") or "" for d in deltas)
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert content == "Ok\n"
    assert calls[0]["function"] == {"name": "bash"} and calls[0]["id"].startswith("chatcmpl-tool-")
    args = "".join(c["function"].get("arguments", "") for c in calls[1:])
    assert json.loads(args) == {"command": "ls -la"}
    assert all(set(c) == {"index", "function"} for c in calls[1:])
