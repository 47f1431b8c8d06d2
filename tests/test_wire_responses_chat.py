"""The Responses API read as the chat request vLLM 0.32 renders for it (each rule seen on the genuine
server: its `input_messages` ids equal `/tokenize`'s render of these messages;
tests/test_real_vllm_responses_on_policy.py re-checks them there)."""

from __future__ import annotations

from rollout_dataset.proxy.on_policy import responses_as_chat
from rollout_dataset.wire.responses_chat import encrypted_reasoning, input_to_messages, tools_to_chat


def parts(*texts: str, kind: str = "input_text") -> list[dict]:
    return [{"type": kind, "text": t} for t in texts]


def test_a_messages_text_parts_are_joined_by_a_newline():
    body = {"input": [{"type": "message", "role": "user", "content": parts("A", "B")}]}
    assert input_to_messages(body) == [{"role": "user", "content": "A\nB"}]


def test_developer_messages_join_the_instructions_in_one_system_message():
    body = {"instructions": "S", "input": [{"type": "message", "role": "developer", "content": parts("D1")},
                                           {"type": "message", "role": "developer", "content": parts("D2a", "D2b")},
                                           {"type": "message", "role": "user", "content": parts("Q")}]}
    assert input_to_messages(body)[0] == {"role": "system", "content": "S\n\nD1\n\nD2a\nD2b"}


def test_a_reasoning_item_is_the_next_assistant_turns_reasoning_and_its_message_and_calls_join_it():
    body = {"input": [{"type": "reasoning", "summary": [], "content": parts("Plan.", kind="reasoning_text")},
                      {"type": "message", "role": "assistant", "content": parts("\n\nListing.", "ignored",
                                                                                kind="output_text")},
                      {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c1", "output": "a.py"}]}
    reply, tool = input_to_messages(body)
    assert reply == {"role": "assistant", "content": "\n\nListing.", "reasoning_content": "Plan.",
                     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": "a.py"}


def test_a_reasoning_item_without_content_is_read_from_its_first_summary():
    body = {"input": [{"type": "reasoning", "content": None,
                       "summary": parts("First.", "Second.", kind="summary_text")},
                      {"type": "message", "role": "assistant", "content": parts("Hi", kind="output_text")}]}
    assert input_to_messages(body)[0]["reasoning_content"] == "First."


def test_tools_are_shown_as_vllms_function_definitions():
    tools = [{"type": "function", "name": "ls", "parameters": {"type": "object"}},
             {"type": "function", "name": "rm", "description": "d", "parameters": {}, "strict": True}]
    assert tools_to_chat(tools) == [
        {"type": "function", "function": {"name": "ls", "description": None, "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "rm", "description": "d", "parameters": {}, "strict": True}}]


def test_a_namespaces_functions_are_flattened_and_a_custom_tool_takes_one_string_and_others_are_dropped():
    tools = [{"type": "namespace", "name": "agents", "description": "N",
              "tools": [{"type": "function", "name": "spawn", "description": "S", "parameters": {}}]},
             {"type": "custom", "name": "apply_patch", "description": "P"}, {"type": "web_search"}]
    spawn, patch = tools_to_chat(tools)
    assert spawn["function"]["name"] == "agents__spawn"
    assert patch["function"]["name"] == "apply_patch"
    assert patch["function"]["parameters"]["properties"] == {
        "input": {"type": "string", "description": "The freeform text payload for this tool."}}


def test_an_encrypted_reasoning_item_is_found_and_a_null_one_is_not():
    sealed = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA"}
    assert encrypted_reasoning({"input": [sealed]})
    assert not encrypted_reasoning({"input": [dict(sealed, encrypted_content=None)]})


def test_a_responses_request_as_chat_keeps_the_fields_that_shape_its_prompt():
    body = {"model": "m", "input": "hi", "max_output_tokens": 7, "chat_template_kwargs": {"enable_thinking": False},
            "tools": [{"type": "function", "name": "ls", "parameters": {}}], "store": False}
    chat = responses_as_chat(body)
    assert chat == {"messages": [{"role": "user", "content": "hi"}], "tools": tools_to_chat(body["tools"]),
                    "model": "m", "chat_template_kwargs": {"enable_thinking": False}, "max_tokens": 7}


def test_a_reasoning_item_with_no_assistant_item_after_it_is_an_assistant_turn_of_its_own():
    user = {"type": "message", "role": "user", "content": parts("Q")}
    body = {"input": [user, {"type": "reasoning", "summary": [], "content": parts("R", kind="reasoning_text")}, user]}
    assert input_to_messages(body)[1] == {"role": "assistant", "content": None, "reasoning_content": "R"}


def test_a_second_reasoning_item_starts_a_new_assistant_turn_which_the_message_after_it_fills():
    think = lambda text: {"type": "reasoning", "summary": [], "content": parts(text, kind="reasoning_text")}  # noqa: E731
    body = {"input": [think("R1"), think("R2"), {"type": "message", "role": "assistant",
                                                  "content": parts("A", kind="output_text")}]}
    assert input_to_messages(body) == [{"role": "assistant", "content": None, "reasoning_content": "R1"},
                                       {"role": "assistant", "content": "A", "reasoning_content": "R2"}]
