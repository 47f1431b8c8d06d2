"""The local backend's two on-policy parts, as vLLM 0.32 serves them: a chat prompt given as ids
(`kv_transfer_params.prompt_token_ids`) and `/tokenize` with messages; and the script policy's
`token_ids` steps (a forced, non-canonical tokenization)."""

from __future__ import annotations

import httpx
import pytest

from rollout_dataset.tokenizers import chat_prompt_ids

USER = [{"role": "user", "content": "What is here?"}]
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {
    "command": {"type": "string"}}}}}]


def char_ids(tokenizer, text: str) -> list[int]:
    """One id per character: the same text, not the tokenizer's own split."""
    return [i for ch in text for i in tokenizer.encode(ch, add_special_tokens=False)]


async def _post(backend, path, body, root=False):
    base = backend.base_url[: -len("/v1")] if root else backend.base_url
    async with httpx.AsyncClient() as h:
        r = await h.post(base + path, json=body)
    return r.status_code, r.json()


async def test_chat_generates_from_the_given_prompt_ids_and_returns_them(local_backend, builtin_tokenizer):
    ids = chat_prompt_ids(builtin_tokenizer, USER) + char_ids(builtin_tokenizer, "zz")
    status, body = await _post(local_backend, "/chat/completions", {
        "messages": USER, "return_token_ids": True, "kv_transfer_params": {"prompt_token_ids": ids}})
    assert status == 200 and body["prompt_token_ids"] == ids
    assert body["usage"]["prompt_tokens"] == len(ids)
    assert body["choices"][0]["message"]["content"] == "What is here?"  # messages still drive the answer


@pytest.mark.parametrize("extra", [{"echo": True},
                                   {"messages": [{"role": "user", "content": [
                                       {"type": "image_url", "image_url": {"url": "data:,"}}]}]}])
async def test_prompt_ids_are_ignored_with_echo_or_non_text_content(local_backend, builtin_tokenizer, extra):
    body = {"messages": USER, "return_token_ids": True, "kv_transfer_params": {"prompt_token_ids": [1, 2, 3]},
            **extra}
    status, out = await _post(local_backend, "/chat/completions", body)
    assert status == 200 and out["prompt_token_ids"] != [1, 2, 3]


async def test_prompt_ids_outside_the_vocabulary_are_refused(local_backend):
    status, body = await _post(local_backend, "/chat/completions", {
        "messages": USER, "kv_transfer_params": {"prompt_token_ids": [1, 10 ** 9]}})
    assert status == 400 and body["error"]["param"] == "kv_transfer_params.prompt_token_ids"
    assert body["error"]["message"] == ("Token id 1000000000 is out of vocabulary "
                                        "(parameter=kv_transfer_params.prompt_token_ids)")


async def test_given_prompt_ids_still_parse_tool_calls_from_messages(start_local_backend, builtin_tokenizer):
    backend = await start_local_backend(policy="script", script=[{"name": "bash", "arguments": {"command": "ls"}}])
    ids = chat_prompt_ids(builtin_tokenizer, USER, TOOLS)
    status, body = await _post(backend, "/chat/completions", {
        "messages": USER, "tools": TOOLS, "kv_transfer_params": {"prompt_token_ids": ids[:-1] + ids[-1:]}})
    assert status == 200 and body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"


async def test_tokenize_renders_messages_as_the_chat_endpoint_does(local_backend, builtin_tokenizer):
    status, body = await _post(local_backend, "/tokenize", {"messages": USER, "tools": TOOLS}, root=True)
    assert status == 200 and set(body) == {"count", "max_model_len", "tokens", "token_strs"}
    _, chat = await _post(local_backend, "/chat/completions", {"messages": USER, "tools": TOOLS, "max_tokens": 1,
                                                               "return_token_ids": True})
    assert body["tokens"] == chat["prompt_token_ids"] and body["count"] == len(body["tokens"])
    _, plain = await _post(local_backend, "/tokenize", {"messages": USER, "add_generation_prompt": False}, root=True)
    from rollout_dataset.tokenizers import encode_text, render_chat

    assert plain["tokens"] == encode_text(builtin_tokenizer, render_chat(builtin_tokenizer, USER, None, False))


async def test_a_script_step_emits_exactly_its_token_ids(start_local_backend, builtin_tokenizer):
    ids = char_ids(builtin_tokenizer, "hello world")
    assert ids != builtin_tokenizer.encode("hello world", add_special_tokens=False)
    backend = await start_local_backend(policy="script", script=[{"token_ids": ids}])
    status, body = await _post(backend, "/chat/completions", {"messages": USER, "return_token_ids": True})
    assert status == 200 and body["choices"][0]["message"]["content"] == "hello world"
    assert body["choices"][0]["token_ids"] == ids + [builtin_tokenizer.eos_token_id]


def test_a_token_ids_step_stands_alone():
    from rollout_dataset.backend.policies import load_script

    with pytest.raises(ValueError, match="token_ids"):
        load_script([{"token_ids": [1], "text": "x"}])
    with pytest.raises(ValueError, match="token_ids"):
        load_script([{"token_ids": []}])


@pytest.mark.parametrize("ids", [[], "abc", [1, -2]])
async def test_prompt_ids_that_are_not_a_list_of_ids_are_refused_with_vllms_message(local_backend, ids):
    status, body = await _post(local_backend, "/chat/completions", {
        "messages": USER, "kv_transfer_params": {"prompt_token_ids": ids}})
    assert status == 400 and body["error"]["message"].startswith(
        "`kv_transfer_params['prompt_token_ids']` must be a non-empty list of non-negative integers.")


async def test_kv_transfer_params_must_be_an_object(local_backend):
    status, body = await _post(local_backend, "/chat/completions", {"messages": USER, "kv_transfer_params": [1]})
    assert status == 400 and body["error"]["param"] == "body.kv_transfer_params"
