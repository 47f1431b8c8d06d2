"""The Messages <-> chat mapping vLLM's Anthropic layer applies (rollout_dataset.wire.anthropic_chat)."""

from __future__ import annotations

from rollout_dataset.wire.anthropic_chat import ChatStreamToMessages, chat_to_message, messages_to_chat

TOOLS = [{"name": "bash", "description": "run", "input_schema": {"type": "object", "properties": {}}}]


def test_system_blocks_are_joined_and_the_billing_header_is_dropped():
    chat = messages_to_chat({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                             "system": [{"type": "text", "text": "x-anthropic-billing-header: cc=1"},
                                        {"type": "text", "text": "A. "}, {"type": "text", "text": "B."}]})
    assert chat["messages"] == [{"role": "system", "content": "A. B."}, {"role": "user", "content": "hi"}]
    assert chat["max_tokens"] == chat["max_completion_tokens"] == 5


def test_tool_use_thinking_and_tool_result_become_tool_calls_reasoning_and_tool_messages():
    body = {"model": "m", "max_tokens": 5, "tools": TOOLS, "messages": [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "need ls", "signature": "s"},
                                          {"type": "text", "text": "Running."},
                                          {"type": "tool_use", "id": "t1", "name": "bash", "input": {"c": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}]}
    chat = messages_to_chat(body)
    assert chat["messages"][1] == {"role": "assistant", "reasoning": "need ls", "content": "Running.",
                                   "tool_calls": [{"id": "t1", "type": "function",
                                                   "function": {"name": "bash", "arguments": '{"c": "ls"}'}}]}
    assert chat["messages"][2] == {"role": "tool", "tool_call_id": "t1", "content": "a\nb"}
    assert len(chat["messages"]) == 3  # the user message held only a tool result: no empty user message
    assert chat["tools"][0]["function"]["parameters"] == TOOLS[0]["input_schema"] and chat["tool_choice"] == "auto"


def test_tool_choice_thinking_and_ignored_fields():
    chat = messages_to_chat({"model": "m", "max_tokens": 9, "messages": [], "tools": TOOLS, "metadata": {"u": 1},
                             "tool_choice": {"type": "any"}, "thinking": {"type": "enabled", "budget_tokens": 4},
                             "stop_sequences": ["END"], "top_k": 3, "kv_transfer_params": {"x": 1}})
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is True
    assert chat["thinking_token_budget"] == 4 and chat["stop"] == ["END"] and chat["top_k"] == 3
    assert chat["kv_transfer_params"] == {"x": 1} and "metadata" not in chat


def test_whole_chat_answer_with_a_tool_call_is_a_tool_use_message():
    chat = {"id": "c1", "model": "m", "usage": {"prompt_tokens": 10, "completion_tokens": 3},
            "choices": [{"finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [
                {"id": "t9", "function": {"name": "bash", "arguments": '{"c": "ls"}'}}]}}]}
    message = chat_to_message(chat)
    assert message["content"] == [{"type": "tool_use", "id": "t9", "name": "bash", "input": {"c": "ls"}}]
    assert message["stop_reason"] == "tool_use" and message["usage"] == {"input_tokens": 10, "output_tokens": 3}


def test_stream_of_text_then_a_tool_call_gives_two_blocks_and_tool_use():
    conv = ChatStreamToMessages()
    chunks = [{"id": "c", "model": "m", "choices": [{"delta": {"role": "assistant", "content": ""}}]},
              {"choices": [{"delta": {"content": "Hi"}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "t1", "function": {"name": "bash", "arguments": ""}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"c": 1}'}}]},
                            "finish_reason": "tool_calls"}]},
              {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 5}}]
    events = [e for chunk in chunks for e in conv.feed(chunk)] + conv.done()
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop", "content_block_start",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert conv.message()["content"] == [{"type": "text", "text": "Hi"},
                                         {"type": "tool_use", "id": "t1", "name": "bash", "input": {"c": 1}}]
