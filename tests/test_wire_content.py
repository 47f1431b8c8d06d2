"""`rollout_dataset.wire.content`: the one reading of a chat message's content as text."""

from __future__ import annotations

from rollout_dataset.wire.content import content_text, text_parts


def test_text_parts_and_bare_strings_join_in_order_and_other_parts_give_nothing():
    content = [{"type": "text", "text": "a"}, "b", {"type": "image_url", "image_url": {"url": "u"}}, {"text": "c"}]
    assert content_text(content) == "abc"


def test_bare_string_parts_can_be_left_out():
    assert text_parts(["b", {"text": "a"}], strings=False) == ["a"]


def test_a_refusal_part_reads_only_when_asked():
    content = [{"type": "refusal", "refusal": "no"}]
    assert content_text(content) == ""
    assert content_text(content, refusals=True) == "no"


def test_any_text_reads_a_text_field_of_any_type():
    assert content_text([{"text": 3}, {"type": "x"}], any_text=True) == "3"
    assert content_text([{"text": 3}]) == ""


def test_none_is_empty_and_other_values_read_as_the_caller_says():
    assert content_text(None) == ""
    assert content_text({"é": 1}) == '{"é": 1}'
    assert content_text(5, other=lambda _: "") == ""
    assert text_parts("text") is None


def test_is_json_takes_one_whole_value_only():
    from rollout_dataset.wire.content import is_json

    assert is_json('{"command": "ls"}') and is_json("NaN")
    assert not is_json('{"command": "l') and not is_json("")
