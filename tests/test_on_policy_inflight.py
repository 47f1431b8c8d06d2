"""On-policy mode's unfinished calls: a request that continues a call whose record is not written yet
waits for it (Codex sends its next request as soon as it has read `response.completed`, before the
proxy has recorded the call that answered it), so its parent is that call, never an older one."""

from __future__ import annotations

import asyncio

from rollout_dataset.proxy.on_policy import InflightCalls, message_key

USER = {"role": "user", "content": "run it"}
REPLY = {"role": "assistant", "content": "\n\nListing."}
KEYS = [message_key(USER)]


async def test_a_request_continuing_an_unfinished_call_waits_until_it_is_finished():
    calls = InflightCalls(wait_s=30)
    token = calls.begin("s", KEYS)
    messages = [USER, REPLY, {"role": "tool", "tool_call_id": "c", "content": "a.py"}]
    waiting = asyncio.ensure_future(calls.wait_for_parents("s", [message_key(m) for m in messages], messages))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    calls.end("s", token)
    assert await asyncio.wait_for(waiting, 5) == 1


async def test_a_request_that_continues_no_unfinished_call_does_not_wait():
    calls = InflightCalls(wait_s=30)
    calls.begin("s", KEYS)
    other = [{"role": "user", "content": "something else"}, REPLY]
    assert await asyncio.wait_for(calls.wait_for_parents("s", [message_key(m) for m in other], other), 5) == 0
    assert await asyncio.wait_for(calls.wait_for_parents("t", KEYS + [message_key(REPLY)], [USER, REPLY]), 5) == 0


async def test_an_unfinished_call_that_never_ends_holds_a_request_at_most_the_bound():
    calls = InflightCalls(wait_s=0.1)
    calls.begin("s", KEYS)
    assert await asyncio.wait_for(calls.wait_for_parents("s", KEYS + [message_key(REPLY)], [USER, REPLY]), 5) == 1
