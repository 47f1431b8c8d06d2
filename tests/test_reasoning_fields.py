"""Where a chat message carries its reasoning (docs/reasoning.md, "In the dataset"): the first of
`reasoning_content`, `reasoning`, `thinking` that holds text, so a null `reasoning_content` beside
vLLM's `reasoning` loses nothing in the `conversations` config or the ATIF export."""

from __future__ import annotations

from rollout_dataset.atif.export import trajectory_document
from rollout_dataset.builder.rows import chat_message
from rollout_dataset.export import export_rollout
from rollout_dataset.reasoning import message_reasoning
from support.synthetic_records import make_record

BOTH_KEYS = {"role": "assistant", "content": "4", "reasoning_content": None, "reasoning": "2 + 2 is 4"}


def test_a_null_reasoning_content_does_not_hide_the_reasoning_field():
    assert message_reasoning(BOTH_KEYS) == "2 + 2 is 4"
    assert message_reasoning({"role": "assistant", "reasoning_content": "", "thinking": "t"}) == "t"
    assert message_reasoning({"role": "assistant", "content": "x"}) is None


def test_the_conversations_row_keeps_reasoning_given_beside_a_null_reasoning_content():
    assert chat_message(BOTH_KEYS)["reasoning_content"] == "2 + 2 is 4"


def test_the_atif_export_keeps_reasoning_given_beside_a_null_reasoning_content():
    records = [make_record(0, [1, 2, 3], [4, 5], response_message=BOTH_KEYS)]
    rollout = export_rollout(records, session_id="s", capture_level="tokens")
    trajectory = trajectory_document(records, rollout, {"rollout_id": "r" * 32, "harness": "h", "model": "m"})
    (agent,) = [s for s in trajectory["steps"] if s["source"] == "agent"]
    assert agent["reasoning_content"] == "2 + 2 is 4"


def test_the_viewer_marks_a_harmony_analysis_tool_call_through_its_call_token_and_not_the_tools_answer():
    from openai_harmony import Author, Conversation, Message, RenderConversationConfig, Role

    from rollout_dataset.tokenizers import load_tokenizer
    from rollout_dataset.viewer.views import reasoning_positions
    from support.genuine_templates import harmony_encoding

    def assistant(text: str, channel: str) -> Message:
        return Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)

    messages = [Message.from_role_and_content(Role.USER, "compute 2+2"), assistant("I will use python", "analysis"),
                assistant("print(2+2)", "analysis").with_recipient("python"),  # a built-in tool call: ends with <|call|>
                Message.from_author_and_content(Author.new(Role.TOOL, "python"), "4").with_channel("analysis")
                .with_recipient("assistant"),
                assistant("It is 4", "final")]
    ids = harmony_encoding().render_conversation(Conversation.from_messages(messages),
                                                 RenderConversationConfig(auto_drop_analysis=False))
    tokenizer = load_tokenizer("harmony")
    marked = reasoning_positions(ids, 0, len(ids), tokenizer)
    text = "".join(tokenizer.decode([t]) for i, t in enumerate(ids) if i in marked)
    assert text == ("<|channel|>analysis<|message|>I will use python<|end|>"
                    "<|channel|>analysis<|message|>print(2+2)<|call|>")


def test_the_viewer_marks_no_reasoning_from_a_think_tag_in_a_users_text():
    from rollout_dataset.viewer.views import reasoning_positions
    from support.reasoning_episodes import Qwen3Chat

    tokenizer = Qwen3Chat().tokenizer
    messages = [{"role": "user", "content": "What does <think> mean in a prompt?"},
                {"role": "assistant", "reasoning_content": "a tag", "content": "It opens reasoning."}]
    ids = [int(x) for x in tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)]
    marked = reasoning_positions(ids, 0, len(ids), tokenizer)
    text = tokenizer.decode([t for i, t in enumerate(ids) if i in marked])
    assert text == "<think>\na tag\n</think>"
