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
