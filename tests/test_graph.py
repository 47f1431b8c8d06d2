"""The prefix graph: parents by longest exact token prefix, forks, discarded retries, message fallback."""

from __future__ import annotations

import json

import pytest

from support.synthetic_records import make_record, synthetic_chain, tool_manifest
from rollout_dataset.graph import build_graph, normalise_message


def _chain(*turns: tuple[list[int], list[int]]) -> list[dict]:
    """Records whose prompts each extend the previous prompt + sampled ids by a context chunk."""
    records, prompt = [], []
    for i, (context, sampled) in enumerate(turns):
        prompt = prompt + context
        records.append(make_record(i, prompt, sampled))
        prompt = prompt + sampled
    return records


def test_prefix_clean_chain_is_one_root_with_each_call_parent_of_the_next():
    graph = build_graph(_chain(([1, 2], [3]), ([4], [5, 6]), ([7], [8])))
    assert [n.parent for n in graph.nodes()] == [None, 0, 1]
    assert graph.stats()["n_roots"] == 1 and graph.stats()["max_depth"] == 3


def test_parent_is_the_longest_prefix_not_just_any_prefix():
    records = [
        make_record(0, [1, 2], [3]),
        make_record(1, [1, 2, 3, 4], [5]),  # child of 0
        make_record(2, [1, 2, 3, 4, 5, 6], [7]),  # 0 and 1 are both prefixes; 1 is longer
    ]
    assert build_graph(records).get(2).parent == 1


def test_prompt_that_only_shares_a_partial_prefix_starts_a_new_root():
    records = [make_record(0, [1, 2], [3]), make_record(1, [1, 2, 9, 4], [5])]
    graph = build_graph(records)
    assert graph.get(1).parent is None
    assert graph.stats()["n_roots"] == 2


def test_two_continued_children_make_a_fork():
    records = [
        make_record(0, [1], [2]),
        make_record(1, [1, 2, 3], [4]),
        make_record(2, [1, 2, 5], [6]),
        make_record(3, [1, 2, 3, 4, 7], [8]),
        make_record(4, [1, 2, 5, 6, 9], [10]),
    ]
    graph = build_graph(records)
    assert [n.node_id for n in graph.forks()] == [0]
    assert graph.discarded_nodes() == []
    assert graph.paths() == [[0, 1, 3], [0, 2, 4]]


def test_retry_of_the_same_prompt_with_one_continued_marks_the_other_discarded():
    records = [
        make_record(0, [1, 2], [3]),
        make_record(1, [1, 2], [4]),  # resample of the same prompt; the harness keeps this one
        make_record(2, [1, 2, 4, 5], [6]),
    ]
    graph = build_graph(records)
    assert [n.node_id for n in graph.discarded_nodes()] == [0]
    assert graph.stats()["n_discarded"] == 1


def test_childless_siblings_where_none_continued_are_not_discarded():
    records = [make_record(0, [1], [2]), make_record(1, [1, 2, 3], [4]), make_record(2, [1, 2, 3], [5])]
    assert build_graph(records).discarded_nodes() == []


def test_non_generation_calls_and_calls_without_response_are_not_nodes():
    records = _chain(([1], [2]), ([3], [4]))
    tokenize = make_record(2, None, None, endpoint="/tokenize")
    failed = make_record(3, [9], [9])
    failed["response"] = None
    graph = build_graph(records + [tokenize, failed])
    assert [n.node_id for n in graph.nodes()] == [0, 1]


def test_records_are_ordered_by_arrival_index_not_list_order():
    records = _chain(([1], [2]), ([3], [4]))
    graph = build_graph(list(reversed(records)))
    assert graph.get(1).parent == 0


def test_duplicate_arrival_index_is_a_clear_error():
    records = [make_record(0, [1], [2]), make_record(0, [1, 2], [3])]
    with pytest.raises(ValueError, match="index 0 appears twice"):
        build_graph(records)


def test_node_carries_tools_finish_reason_params_and_harness_session():
    record = make_record(
        0, [1], [2], tools=tool_manifest("bash", "read"), finish_reason="tool_calls",
        sampling={"temperature": 0.5}, harness_session_id="ses_1",
    )
    node = build_graph([record]).get(0)
    assert node.n_tools == 2
    assert node.finish_reason == "tool_calls"
    assert node.requested_sampling_params == {"temperature": 0.5}
    assert node.effective_sampling_params["temperature"] == 0.5
    assert node.harness_session_id == "ses_1"
    assert node.sampled_logprobs == [-0.5]


def _msg_records() -> list[dict]:
    sys_msg = {"role": "system", "content": "agent"}
    user = {"role": "user", "content": "task"}
    call = {"id": "a", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls", "n": 1}'}}
    reply = {"role": "assistant", "content": "", "tool_calls": [call]}
    # The harness sends the call back with another id, other key order and spacing, and no content.
    echoed = {"role": "assistant", "tool_calls": [{"id": "b", "type": "function", "function": {"name": "bash", "arguments": '{"n":1,"cmd":"ls"}'}}]}
    tool = {"role": "tool", "tool_call_id": "b", "content": "a.py"}
    return [
        make_record(0, None, None, messages=[sys_msg, user], response_message=reply),
        make_record(1, None, None, messages=[sys_msg, user, echoed, tool]),
    ]


def test_without_ids_the_graph_links_calls_by_normalised_messages():
    graph = build_graph(_msg_records())
    assert graph.mode == "messages"
    assert graph.get(1).parent == 0


def test_tool_call_argument_json_is_normalised_for_comparison():
    a = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": json.dumps({"x": 1, "y": [1, 2]})}}]}
    b = {"role": "assistant", "content": "", "tool_calls": [{"id": "z", "function": {"name": "f", "arguments": '{ "y":[1,2], "x":1 }'}}]}
    assert normalise_message(a) == normalise_message(b)


def test_message_fallback_detects_a_retry_as_discarded():
    records = _msg_records()
    retry = make_record(2, None, None, messages=records[0]["request"]["messages"])
    records.insert(1, retry)
    records[2]["index"] = 2
    records[1]["index"] = 1
    records[1]["response"]["choices"][0]["message"] = {"role": "assistant", "content": "oops"}
    graph = build_graph(records)
    assert [n.node_id for n in graph.discarded_nodes()] == [1]


def test_long_synthetic_rollout_is_one_chain():
    graph = build_graph(synthetic_chain(50, 5000))
    assert graph.stats() == {
        "n_turns": 50, "n_roots": 1, "n_forks": 0, "n_discarded": 0, "n_leaves": 1, "max_depth": 50, "mode": "tokens",
    }


def test_longer_parent_is_found_beyond_a_previous_call_that_is_also_a_prefix():
    records = [
        make_record(0, [1], [2]),
        make_record(1, [1, 2, 3], [4]),
        make_record(2, [1], [2]),  # the previous call of 3 is a prefix of its prompt, but not the longest
        make_record(3, [1, 2, 3, 4, 5], [6]),
    ]
    graph = build_graph(records)
    assert graph.get(3).parent == 1
    assert [n.node_id for n in graph.discarded_nodes()] == [2]


def test_prompt_equal_to_an_earlier_full_sequence_is_its_child():
    graph = build_graph([make_record(0, [1, 2], [3]), make_record(1, [1, 2, 3], [4])])
    assert graph.get(1).parent == 0


def test_interleaved_conversations_each_form_their_own_chain():
    a = _chain(([1, 2], [3]), ([4], [5]), ([6], [7]))
    b = _chain(([90, 91], [92]), ([93], [94]), ([95], [96]))
    records = [dict(r, index=i) for i, r in enumerate(x for pair in zip(a, b) for x in pair)]
    graph = build_graph(records)
    assert [n.parent for n in graph.nodes()] == [None, None, 0, 1, 2, 3]


def test_identical_resamples_link_the_continuation_to_the_latest():
    records = [
        make_record(0, [1, 2], [3]),
        make_record(1, [1, 2], [3]),  # same prompt, same sample (seeded)
        make_record(2, [1, 2, 3, 4], [5]),
        make_record(3, [1, 2, 3, 4, 5, 6], [7]),
    ]
    graph = build_graph(records)
    assert graph.get(2).parent == 1
    assert [n.node_id for n in graph.discarded_nodes()] == [0]


def test_a_conversation_resumed_after_many_other_roots_still_finds_its_parent():
    records = [make_record(0, [1, 2], [3])]
    records += [make_record(k, [10 + k], [20]) for k in range(1, 6)]  # more open roots than the recent guesses
    records.append(make_record(6, [1, 2, 7], [8]))  # same first token as call 0, not its child
    records.append(make_record(7, [1, 2, 3, 4], [5]))
    graph = build_graph(records)
    assert graph.get(7).parent == 0
    assert graph.get(6).parent is None


def test_every_call_a_new_root_with_equal_prompts_groups_the_retries():
    records = [make_record(0, [1, 2], [3]), make_record(1, [1, 2], [4]), make_record(2, [1, 2, 3, 9], [5])]
    records += [make_record(3 + k, [50 + k, 2], [3]) for k in range(3)]  # roots sharing no first token
    graph = build_graph(records)
    assert [n.node_id for n in graph.discarded_nodes()] == [1]
    assert graph.stats()["n_roots"] == 5


@pytest.mark.parametrize("bad", [[1, 2.5], [1, "x"], [1, 2**64]])
def test_token_ids_that_are_not_int64_are_a_clear_error_even_in_a_root_nobody_extends(bad):
    records = [make_record(0, [7, 8], [9]), make_record(1, bad, [3])]
    with pytest.raises(ValueError, match="token ids must be integers in int64 range"):
        build_graph(records)
