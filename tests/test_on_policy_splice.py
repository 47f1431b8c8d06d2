"""The pure part of on-policy mode: finding the parent call and splicing the sampled ids into the
server's render, on small id lists that spell out each template shape."""

from __future__ import annotations

from rollout_dataset.proxy.on_policy import (
    PastCall,
    SessionMemory,
    drift_of,
    message_key,
    past_call_from_record,
    plan_splice,
    request_context,
)

# ids: 1 <|im_start|>, 2 <|im_end|>, 5 "assistant", 6 "user", 9 "\n"; 20.. content
SYS = [1, 6, 9, 20, 2, 9]


def parent(sampled, finish="stop", prompt=None):
    return PastCall(0, [], "", [], prompt or SYS + [1, 5, 9], sampled, finish)


def test_a_canonical_reply_gives_the_servers_own_render():
    render = SYS + [1, 5, 9, 30, 31, 2, 9] + [1, 6, 9, 40, 2, 9, 1, 5, 9]
    blank = SYS + [1, 5, 9, 2, 9] + [1, 6, 9, 40, 2, 9, 1, 5, 9]
    plan = plan_splice(parent([30, 31, 2]), SYS + [1, 5, 9], render, blank)
    assert plan.target == render and not plan.needs_text_check


def test_a_retokenized_reply_keeps_the_sampled_ids_and_asks_for_a_text_check():
    render = SYS + [1, 5, 9, 30, 2, 9, 1, 6, 9, 40, 2, 9, 1, 5, 9]  # server merged 31+32 into 30
    blank = SYS + [1, 5, 9, 2, 9, 1, 6, 9, 40, 2, 9, 1, 5, 9]
    plan = plan_splice(parent([31, 32, 2]), SYS + [1, 5, 9], render, blank)
    assert plan.target == SYS + [1, 5, 9, 31, 32, 2, 9, 1, 6, 9, 40, 2, 9, 1, 5, 9]
    assert (plan.sampled_content, plan.rendered_content) == ([31, 32], [30]) and plan.needs_text_check
    assert drift_of(render, plan.target) == {"position": 9, "server_tokens": 1, "sent_tokens": 2}


def test_a_header_newline_that_only_history_has_is_dropped_where_the_model_generated():
    # the tiny ChatML template: generation prompt "<|im_start|>assistant", history "<|im_start|>assistant\n..."
    gen = SYS + [1, 5]
    render = gen + [9, 30, 2, 9, 1, 6, 9, 40, 2, 1, 5]
    blank = gen + [9, 2, 9, 1, 6, 9, 40, 2, 1, 5]
    plan = plan_splice(parent([30, 2], prompt=gen), gen, render, blank)
    assert plan.target == gen + [30, 2, 9, 1, 6, 9, 40, 2, 1, 5]


def test_a_reply_cut_by_max_tokens_is_closed_by_the_templates_end_of_turn():
    render = SYS + [1, 5, 9, 30, 2, 9, 1, 6, 9, 40, 2, 9, 1, 5, 9]
    blank = SYS + [1, 5, 9, 2, 9, 1, 6, 9, 40, 2, 9, 1, 5, 9]
    plan = plan_splice(parent([30], finish="length"), SYS + [1, 5, 9], render, blank)
    assert plan.target == render


def test_a_different_end_token_is_not_repaired():
    render = SYS + [1, 5, 9, 30, 2, 9, 1, 5, 9]
    blank = SYS + [1, 5, 9, 2, 9, 1, 5, 9]
    plan = plan_splice(parent([30, 7]), SYS + [1, 5, 9], render, blank)
    assert plan.target is None and plan.reason == "end_of_turn_differs"


def test_a_history_the_server_now_renders_differently_is_not_repaired():
    render = [1, 6, 9, 21, 2, 9, 1, 5, 9, 30, 2, 9, 1, 5, 9]
    plan = plan_splice(parent([30, 2]), SYS + [1, 5, 9], render, render)
    assert plan.target is None and plan.reason == "history_rerendered" and "token 3" in plan.detail


def user(text):
    return {"role": "user", "content": text}


def test_the_parent_is_the_longest_earlier_call_extended_by_a_reply():
    memory = SessionMemory()
    first = [user("a")]
    memory.remember("s", PastCall(0, [message_key(m) for m in first], "ctx", first, [1], [2]))
    second = first + [{"role": "assistant", "content": "x"}, user("b")]
    memory.remember("s", PastCall(1, [message_key(m) for m in second], "ctx", second, [1, 2], [3]))
    third = second + [{"role": "assistant", "content": "y"}, user("c")]
    assert memory.find_parent("s", third, "ctx").parent.index == 1
    assert memory.find_parent("other", third, "ctx").reason == "no_parent"
    assert memory.find_parent("s", third, "tools changed").reason == "context_changed"
    assert memory.find_parent("s", [user("z")], "ctx").reason == "new_conversation"
    rewritten = [{"role": "system", "content": "new"}] + third
    lookup = memory.find_parent("s", rewritten, "ctx")
    assert lookup.parent is None and "message 0" in lookup.detail


def test_tool_call_arguments_match_however_the_harness_re_encodes_them():
    a = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}]}
    b = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"x":1}'}}]}
    assert message_key(a) == message_key(b)


def test_memory_stays_within_its_id_budget():
    memory = SessionMemory(max_ids=100)
    for i in range(30):
        memory.remember(f"s{i % 3}", PastCall(i, [], "", [], list(range(20)), [1] * 5))
    assert memory.n_ids <= 100


def test_an_on_policy_prompt_that_would_overflow_the_context_where_the_render_fits_is_named():
    from rollout_dataset.proxy.on_policy_upstream import context_overflow

    assert "max_model_len 100" in context_overflow(95, 80, 100, {"max_tokens": 10})
    assert context_overflow(95, 80, 100, {}) is None  # room left for the output
    assert context_overflow(95, 80, None, {"max_tokens": 10}) is None  # unknown limit
    assert context_overflow(95, 95, 100, {"max_tokens": 10}) is None  # the render overflows alike


def test_a_parent_rebuilt_from_another_workers_record_is_found_like_one_remembered_here():
    messages = [{"role": "user", "content": "hi"}]
    record = {"index": 0, "endpoint": "/v1/chat/completions", "status": 200, "error": None,
              "request": {"model": "m", "messages": messages}, "prompt_token_ids": [1, 2, 3],
              "completion_token_ids": [4, 5], "finish_reason": "stop"}
    memory = SessionMemory()
    memory.remember("s", past_call_from_record(record))
    memory.remember("s", past_call_from_record(record))  # read twice: kept once
    follow_up = messages + [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    lookup = memory.find_parent("s", follow_up, request_context({"model": "m", "messages": follow_up}))
    assert lookup.parent is not None and lookup.parent.index == 0
    assert list(lookup.parent.completion_ids) == [4, 5] and memory.n_ids == 5
    for failed in ({"status": 500}, {"error": {"kind": "upstream_status"}}, {"completion_token_ids": None},
                   {"endpoint": "/v1/completions"}):
        assert past_call_from_record({**record, **failed}) is None


def test_a_parent_read_back_from_a_record_knows_whether_the_chat_endpoint_rendered_its_prompt():
    from rollout_dataset.proxy.on_policy import past_call_from_record

    record = {"endpoint": "/v1/chat/completions", "status": 200, "error": None, "index": 0,
              "request": {"messages": [{"role": "user", "content": "w"}]}, "prompt_token_ids": [1],
              "completion_token_ids": [2], "continuity": {"status": "exact"}}
    assert past_call_from_record(record).server_rendered is True
    assert past_call_from_record({**record, "continuity": {"status": "repaired"}}).server_rendered is False
    harness_ids = {**record, "request": {**record["request"], "kv_transfer_params": {"prompt_token_ids": [1]}}}
    assert past_call_from_record(harness_ids).server_rendered is False
