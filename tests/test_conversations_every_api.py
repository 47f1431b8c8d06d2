"""Every trainable sequence has its `conversations` row, whichever API the harness spoke: chat
completions, the Responses API (Codex, the agents SDK) and Anthropic Messages (Claude Code). Records
come from the real proxy in front of the local backend; one record -> chat mapping
(`rollout_dataset.wire.records`) serves the graph and the rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.api_sessions import chat_session, messages_session, recorded_session, responses_session

from rollout_dataset.builder.rows import conversation_rows, sequence_rows
from rollout_dataset.errors import ArtifactError
from rollout_dataset.export import export_rollout
from rollout_dataset.export.findings import stored_conversation_findings
from rollout_dataset.tokenizers import load_tokenizer


async def _art(tmp_path: Path, drive: Any) -> dict:
    records = await recorded_session(tmp_path, drive)
    document = export_rollout(records, session_id="s", capture_level="tokens", tokenizer=load_tokenizer("builtin"))
    summary = {"rollout_id": "r", "task_id": "t", "env_reward": 1.0, "reward_after_penalties": 1.0}
    return {"summary": summary, "trace": {"calls": records}, "rollout": document}


@pytest.mark.parametrize("drive", [chat_session, responses_session, messages_session], ids=["chat", "responses", "messages"])
async def test_each_trainable_sequence_of_every_api_has_its_conversations_row(tmp_path, drive):
    art = await _art(tmp_path, drive)
    seq_rows = sequence_rows(art)
    trainable = [s for s in seq_rows if s["trainable"]]
    assert trainable
    rows = conversation_rows(art, seq_rows)
    assert [r["sequence_index"] for r in rows] == [s["sequence_index"] for s in trainable]
    last = rows[-1]["messages"]
    assert [m["role"] for m in last][-2:] == ["user", "assistant"] and last[-2]["content"] == "question 2"
    assert last[-1]["content"]


async def test_a_trainable_sequence_without_a_conversation_fails_the_build_naming_it(tmp_path):
    art = await _art(tmp_path, chat_session)
    seq_rows = sequence_rows(art)
    last = next(s for s in seq_rows if s["trainable"])["node_ids"][-1]
    for call in art["trace"]["calls"]:
        if call["index"] == last:
            call["request"] = {"model": "local"}  # a request that reads as no conversation
    with pytest.raises(ArtifactError, match=r"rollout r sequence \d+: its last call .* conversations config"):
        conversation_rows(art, seq_rows)


async def test_a_responses_call_continuing_a_stored_response_names_its_conversation_partial(tmp_path):
    records = await recorded_session(tmp_path, responses_session)
    last = records[-1]
    full_ids = list(last["prompt_token_ids"])
    # as a harness sends it to vLLM with its response store on: the new item and the stored answer's id
    last["request"] = dict(last["request"], input=last["request"]["input"][-1:], previous_response_id="resp_stored")
    document = export_rollout(records, session_id="s", capture_level="tokens", tokenizer=load_tokenizer("builtin"))
    (partial,) = [f for f in document["findings"] if f["code"] == "conversation_partial"]
    assert partial["level"] == "WARN" and partial["call_index"] == last["index"] and "'resp_stored'" in partial["message"]
    summary = {"rollout_id": "r", "task_id": "t", "env_reward": 1.0, "reward_after_penalties": 1.0}
    art = {"summary": summary, "trace": {"calls": records}, "rollout": document}
    seq_rows = sequence_rows(art)
    (row,) = [r for r in conversation_rows(art, seq_rows) if seq_rows[r["sequence_index"]]["node_ids"][-1] == last["index"]]
    assert [m["content"] for m in row["messages"]][:1] == ["question 2"]  # only the new item: the row is partial
    sequence = seq_rows[row["sequence_index"]]
    assert "conversation_partial" in sequence["findings"], "the partial row's sequence does not name it"
    assert sequence["input_ids"][:len(full_ids)] == full_ids, "the token ids keep the whole conversation"


def test_a_partial_conversation_without_token_ids_does_not_claim_its_ids_hold_the_turns():
    request = {"model": "m", "input": [{"role": "user", "content": "next"}], "previous_response_id": "resp_gone"}
    call = {"index": 3, "endpoint": "/v1/responses", "request": request}
    with_ids = stored_conversation_findings({**call, "prompt_token_ids": [1, 2, 3]})
    failed = stored_conversation_findings({**call, "prompt_token_ids": None})  # e.g. the server has no store
    assert "its token ids hold them" in with_ids[0]["message"]
    assert failed[0]["code"] == "conversation_partial" and "token ids" not in failed[0]["message"]
