"""Server-sent events: one framing rule for what the package sends, httpx-sse for what it reads."""

from __future__ import annotations

import asyncio

from rollout_dataset.wire.anthropic_chat import assemble_events, encode_events
from rollout_dataset.wire.sse import DONE, aiter_events, encode_event, encode_json_event, iter_events


def test_an_unnamed_single_line_event_is_one_data_line_as_vllm_frames_it():
    assert encode_event('{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_event(DONE) == b"data: [DONE]\n\n"


def test_a_named_multi_line_event_has_an_event_line_and_one_data_line_per_line():
    assert encode_event("one\ntwo", "message_start", "7") == b"event: message_start\nid: 7\ndata: one\ndata: two\n\n"


def test_json_events_keep_non_ascii_text_and_compact_separators():
    assert encode_json_event({"text": "é<b>"}, "delta") == 'event: delta\ndata: {"text":"é<b>"}\n\n'.encode()


def test_what_is_encoded_decodes_back_to_the_same_events():
    body = encode_event("a\nb", "x") + encode_json_event({"k": "ü"}) + encode_event(DONE)
    assert [(e.event, e.data) for e in iter_events(body)] == [("x", "a\nb"), ("message", '{"k":"ü"}'),
                                                              ("message", DONE)]


def test_a_stream_split_anywhere_even_inside_a_character_decodes_to_the_same_events():
    body = encode_json_event({"text": "日本"}, "delta") + b": a comment\n\n" + encode_event(DONE)

    async def byte_by_byte():
        for i in range(len(body)):
            yield body[i:i + 1]

    async def collect():
        return [(e.event, e.data) async for e in aiter_events(byte_by_byte())]

    assert asyncio.run(collect()) == [(e.event, e.data) for e in iter_events(body)]
    assert [e.data for e in iter_events(body)] == ['{"text":"日本"}', DONE]


def test_a_messages_stream_assembles_to_its_message_through_the_shared_decoder():
    stream = encode_events([
        ("message_start", {"type": "message_start", "message": {"id": "m", "role": "assistant", "content": []}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "hi\nthere"}}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
    ])
    message = assemble_events(stream.decode("utf-8"))
    assert message is not None
    assert message["content"] == [{"type": "text", "text": "hi\nthere"}]
    assert message["stop_reason"] == "end_turn"
