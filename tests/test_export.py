"""The rollout document: sequences, loss masks, logprobs, roles, findings, turns document, schema."""

from __future__ import annotations

import pytest

from rollout_dataset.export import export_rollout, summarise, turns_document
from support.synthetic_records import make_record, tool_manifest
from rollout_dataset.graph import build_graph
from rollout_dataset.schema import schema_errors

TOOLS = tool_manifest("bash", "write")


def _export(records, level="tokens", **kw):
    return export_rollout(records, session_id="s1", metadata={"task": "t"}, capture_level=level, **kw)


def _two_turns(tools=TOOLS):
    return [
        make_record(0, [10, 11, 12], [20, 21], tools=tools, logprobs=[-0.1, -0.2]),
        # tool result + template tokens between turns: 30, 31 (context)
        make_record(1, [10, 11, 12, 20, 21, 30, 31], [22, 23, 24], tools=tools, logprobs=[-0.3, -0.4, -0.5]),
    ]


def test_sequence_is_leaf_prompt_plus_sampled_with_mask_on_exactly_the_sampled_tokens():
    seq = _export(_two_turns())["sequences"][0]
    assert seq["input_ids"] == [10, 11, 12, 20, 21, 30, 31, 22, 23, 24]
    assert seq["loss_mask"] == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1]
    assert seq["n_trainable"] == 5


def test_logprobs_align_to_input_ids_with_zero_on_context_positions():
    seq = _export(_two_turns())["sequences"][0]
    assert seq["logprobs"] == pytest.approx([0, 0, 0, -0.1, -0.2, 0, 0, -0.3, -0.4, -0.5])


def test_sequence_counts_prompt_len_turns_and_turn_lengths():
    seq = _export(_two_turns())["sequences"][0]
    assert (seq["prompt_len"], seq["n_turns"], seq["turn_lengths"], seq["node_ids"]) == (3, 2, [2, 3], [0, 1])


def test_document_and_turns_document_validate_against_their_schemas():
    records = _two_turns()
    doc = _export(records)
    assert schema_errors(doc, "rollout") == []
    assert schema_errors(turns_document(doc, records), "turns") == []


def test_toolless_root_beside_a_tool_using_root_is_auxiliary():
    records = [make_record(0, [1, 2], [3], tools=None)] + [
        make_record(r["index"] + 1, r["prompt_token_ids"], r["completion_token_ids"], tools=TOOLS) for r in _two_turns()
    ]
    doc = _export(records)
    assert [s["role"] for s in doc["sequences"]] == ["auxiliary", "agent"]
    assert [s["trainable"] for s in doc["sequences"]] == [False, True]


def test_when_no_call_carries_tools_every_live_path_is_agent():
    records = [make_record(0, [1, 2], [3]), make_record(1, [7, 8], [9])]
    doc = _export(records)
    assert [s["role"] for s in doc["sequences"]] == ["agent", "agent"]
    assert doc["stats"]["n_trainable_sequences"] == 2


def test_discarded_sequence_is_labelled_and_kept_by_default_and_dropped_on_request():
    records = [
        make_record(0, [1, 2], [3], tools=TOOLS),
        make_record(1, [1, 2], [4], tools=TOOLS),
        make_record(2, [1, 2, 4, 5], [6], tools=TOOLS),
    ]
    doc = _export(records)
    assert [s["role"] for s in doc["sequences"]] == ["discarded", "agent"]
    assert [c["discarded"] for c in doc["calls"]] == [True, False, False]
    kept = _export(records, include_discarded=False)
    assert [s["role"] for s in kept["sequences"]] == ["agent"]
    assert len(kept["calls"]) == 3


def test_below_tokens_structure_is_built_but_arrays_are_empty_and_nothing_trainable():
    records = [make_record(i, None, None, tools=TOOLS) for i in range(2)]
    records[1]["request"]["messages"] = records[0]["request"]["messages"] + [records[0]["response"]["choices"][0]["message"]]
    doc = _export(records, level="text")
    assert doc["rollout_type"] == "eval" and doc["trainable"] is False
    assert doc["stats"]["n_roots"] == 1 and doc["stats"]["max_depth"] == 2
    (seq,) = doc["sequences"]
    assert (seq["input_ids"], seq["loss_mask"], seq["logprobs"], seq["n_trainable"]) == ([], [], [], 0)
    assert seq["role"] == "agent" and seq["n_turns"] == 2
    assert schema_errors(doc, "rollout") == []


def test_capture_level_tokens_with_missing_ids_is_an_error_and_untrainable():
    records = [make_record(0, [1], [2]), make_record(1, None, None)]
    doc = _export(records)
    assert any(f["code"] == "ids_missing" and f["call_index"] == 1 for f in doc["findings"])
    assert doc["trainable"] is False


def _codes(findings):
    return {(f["level"], f["code"]) for f in findings}


def test_finish_reason_length_is_a_truncated_warning():
    doc = _export([make_record(0, [1], [2, 3], finish_reason="length", sampling={"max_tokens": 2})])
    assert ("WARN", "truncated") in _codes(doc["sequences"][0]["findings"])
    assert doc["sequences"][0]["trainable"] is True


def test_missing_logprobs_warn_and_keep_the_sequence_trainable():
    doc = _export([make_record(0, [1], [2, 3], logprobs=None)])
    assert ("WARN", "logprobs_missing") in _codes(doc["findings"])
    assert doc["sequences"][0]["trainable"] is True


def test_wrong_logprob_count_is_an_error_that_blocks_the_sequence():
    doc = _export([make_record(0, [1], [2, 3], logprobs=[-1.0])])
    (finding,) = [f for f in doc["findings"] if f["code"] == "logprobs_count"]
    assert finding["level"] == "ERROR" and finding["call_index"] == 0 and finding["position"] == 2
    assert doc["sequences"][0]["trainable"] is False and doc["trainable"] is False


@pytest.mark.parametrize("sampling", [{"temperature": 0.7}, {"top_p": 0.9}, {"top_k": 20}])
def test_non_neutral_sampling_makes_logprobs_incomparable(sampling):
    doc = _export([make_record(0, [1], [2], sampling=sampling)])
    assert ("WARN", "sampling_incomparable") in _codes(doc["findings"])


def test_neutral_sampling_raises_no_sampling_finding():
    doc = _export([make_record(0, [1], [2], sampling={"temperature": 1.0, "top_p": 1, "top_k": -1})])
    assert "sampling_incomparable" not in {f["code"] for f in doc["findings"]}


def test_id_counts_that_disagree_with_usage_are_length_errors():
    record = make_record(0, [1, 2], [3], usage={"prompt_tokens": 2, "completion_tokens": 4})
    doc = _export([record])
    assert ("ERROR", "length_mismatch") in _codes(doc["findings"])
    assert doc["trainable"] is False


def test_empty_sampled_ids_are_an_error():
    doc = _export([make_record(0, [1], [])])
    assert ("ERROR", "empty_ids") in _codes(doc["findings"])


def test_turns_document_derives_mask_roles_and_trained_from_the_same_graph():
    records = [make_record(0, [1, 2], [3], tools=None)] + [
        make_record(r["index"] + 1, r["prompt_token_ids"], r["completion_token_ids"], tools=TOOLS,
                    finish_reason="tool_calls", logprobs=r["per_token_logps"])
        for r in _two_turns()
    ]
    doc = _export(records)
    turns = turns_document(doc, records)
    assert turns["mask_is_derived"] is True
    assert [(t["call_index"], t["role"], t["trained"]) for t in turns["turns"]] == [
        (0, "auxiliary", False), (1, "agent", True), (2, "agent", True),
    ]
    last = turns["turns"][2]
    assert last["mask"] == [0] * 7 + [1] * 3
    assert (last["n_prompt_ids"], last["n_output_ids"], last["per_token_logps"]) == (7, 3, [-0.3, -0.4, -0.5])


def test_turns_document_accepts_a_graph():
    records = _two_turns()
    turns = turns_document(build_graph(records), records)
    assert [t["trained"] for t in turns["turns"]] == [True, True]


def test_turns_document_below_tokens_has_empty_ids_and_null_logprobs():
    records = [make_record(0, None, None)]
    turns = turns_document(_export(records, level="text"), records)
    (turn,) = turns["turns"]
    assert (turn["prompt_ids"], turn["output_ids"], turn["mask"], turn["per_token_logps"]) == ([], [], [], None)
    assert schema_errors(turns, "turns") == []


def test_unknown_capture_level_is_a_clear_error():
    with pytest.raises(ValueError, match="capture_level must be one of"):
        _export([], level="ids")


def test_summary_shows_shape_roles_and_non_info_findings_only():
    records = [make_record(0, [1], [2, 3], finish_reason="length", notes=["a proxy note"])]
    text = summarise(_export(records))
    assert "1 calls, 1 root(s)" in text
    assert "[agent" in text
    assert "truncated" in text
    assert "a proxy note" not in text  # INFO


def test_eval_rollout_at_tokens_level_keeps_ids_but_masks_nothing():
    doc = _export(_two_turns(), rollout_type="eval")
    (seq,) = doc["sequences"]
    assert len(seq["input_ids"]) == 10 and set(seq["loss_mask"]) == {0}
    assert seq["n_trainable"] == 0 and doc["trainable"] is False
    assert doc["metadata"] == {"task": "t"}


def test_root_level_retry_of_the_same_request_is_not_reported_as_a_prefix_break():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    records = [make_record(0, [1, 2], [3], messages=messages), make_record(1, [1, 2], [4], messages=messages)]
    doc = _export(records)
    assert [f for f in doc["findings"] if f["code"] == "prefix_break"] == []


def test_rewritten_history_is_named_as_the_cause_of_a_new_root():
    start = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    first = make_record(0, [1, 2], [3], messages=start)
    second = make_record(1, [1, 2, 9, 9], [4], messages=start + [{"role": "assistant", "content": "(summary of earlier turns)"},
                                                                 {"role": "user", "content": "go on"}])
    (brk,) = [f for f in _export([first, second])["findings"] if f["code"] == "prefix_break"]
    assert brk["call_index"] == 1 and "history rewritten" in brk["message"]
