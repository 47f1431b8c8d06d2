"""The built-in tokenizer and its chat template."""

from __future__ import annotations

import json
import shutil

import pytest

from rollout_dataset.backend import CHAT_TEMPLATE, SPECIAL_TOKENS, render_assistant_text
from rollout_dataset.tokenizers import chat_prompt_ids, encode_text, load_tokenizer, render_chat
from rollout_dataset.backend.train_tokenizer import TOKENIZER_DIR, main as train_main

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                           "parameters": {"type": "object",
                                                          "properties": {"command": {"type": "string"}}}}}]


def test_training_script_reproduces_the_shipped_tokenizer(capsys):
    assert train_main(["--check"]) == 0
    assert "matches" in capsys.readouterr().out


def test_vocabulary_is_a_few_thousand_byte_level_tokens(builtin_tokenizer):
    assert 2000 <= len(builtin_tokenizer) <= 4096
    text = "naïve café ✓ \x00 tab\tnew\nline"
    assert builtin_tokenizer.decode(encode_text(builtin_tokenizer, text)) == text


def test_special_tokens_are_single_ids_at_the_start_of_the_vocabulary(builtin_tokenizer):
    for i, tok in enumerate(SPECIAL_TOKENS):
        assert builtin_tokenizer.convert_tokens_to_ids(tok) == i
        assert encode_text(builtin_tokenizer, tok) == [i]
    assert builtin_tokenizer.eos_token == "<|im_end|>"
    assert builtin_tokenizer.pad_token == "<|endoftext|>"


def test_shipped_chat_template_is_the_declared_one(builtin_tokenizer):
    assert builtin_tokenizer.chat_template == CHAT_TEMPLATE


def test_template_renders_system_and_user_turns_and_generation_prompt(builtin_tokenizer):
    text = render_chat(builtin_tokenizer, [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "hi"}])
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_template_puts_a_tool_manifest_in_the_system_turn(builtin_tokenizer):
    text = render_chat(builtin_tokenizer, [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "hi"}], TOOLS)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert "<tools>\n" + json.dumps(TOOLS[0]["function"]) + "\n</tools>" in system
    assert text.count("<|im_start|>system") == 1


def test_template_renders_assistant_tool_calls_in_hermes_form(builtin_tokenizer):
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    text = render_chat(builtin_tokenizer, [{"role": "user", "content": "list"},
                                           {"role": "assistant", "content": "Looking.", "tool_calls": [call]}],
                       TOOLS, add_generation_prompt=False)
    assert text.endswith('<|im_start|>assistant\nLooking.\n<tool_call>\n{"name": "bash", "arguments": '
                         '{"command": "ls"}}\n</tool_call><|im_end|>\n')


def test_template_accepts_arguments_as_an_object(builtin_tokenizer):
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}
    text = render_chat(builtin_tokenizer, [{"role": "assistant", "content": None, "tool_calls": [call]}],
                       add_generation_prompt=False)
    assert '{"name": "bash", "arguments": {"command": "ls"}}' in text


def test_template_groups_consecutive_tool_results_in_one_user_turn(builtin_tokenizer):
    text = render_chat(builtin_tokenizer, [{"role": "tool", "tool_call_id": "a", "content": "one"},
                                           {"role": "tool", "tool_call_id": "b", "content": "two"}],
                       add_generation_prompt=False)
    assert text == ("<|im_start|>user\n<tool_response>\none\n</tool_response>\n"
                    "<tool_response>\ntwo\n</tool_response><|im_end|>\n")


def test_template_renders_reasoning_content_as_a_think_block(builtin_tokenizer):
    text = render_chat(builtin_tokenizer, [{"role": "assistant", "content": "4", "reasoning_content": "2+2"}],
                       add_generation_prompt=False)
    assert text == "<|im_start|>assistant\n<think>\n2+2\n</think>\n\n4<|im_end|>\n"


def test_template_keeps_think_blocks_written_in_content(builtin_tokenizer):
    content = "<think>\nhmm\n</think>\n\nyes"
    text = render_chat(builtin_tokenizer, [{"role": "assistant", "content": content}], add_generation_prompt=False)
    assert content in text
    assert encode_text(builtin_tokenizer, text).count(builtin_tokenizer.convert_tokens_to_ids("<think>")) == 1


def test_template_joins_text_content_parts(builtin_tokenizer):
    text = render_chat(builtin_tokenizer, [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                        {"type": "text", "text": "b"}]}])
    assert "<|im_start|>user\nab<|im_end|>" in text


def test_chat_template_kwargs_can_disable_thinking(builtin_tokenizer):
    text = render_chat(builtin_tokenizer, [{"role": "user", "content": "hi"}],
                       chat_template_kwargs={"enable_thinking": False})
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


# (text starting with two spaces is the exception: the prompt's final "\n" would merge with them)
@pytest.mark.parametrize("content", ["I'll look.", "", " one leading space", "\nnewline first", "ends\n"])
def test_assistant_turn_rerenders_to_the_generated_ids(builtin_tokenizer, content):
    messages = [{"role": "user", "content": "list files"}]
    prompt_text = render_chat(builtin_tokenizer, messages, TOOLS)
    prompt = chat_prompt_ids(builtin_tokenizer, messages, TOOLS)
    calls = [{"name": "bash", "arguments": {"command": "ls -la"}}]
    emitted = render_assistant_text(content, calls)
    full = encode_text(builtin_tokenizer, prompt_text + emitted) + [builtin_tokenizer.eos_token_id]
    assert full[: len(prompt)] == prompt
    completion = full[len(prompt):]
    head, _, _ = emitted.partition("<tool_call>")
    echoed = {"role": "assistant", "content": head or None,
              "tool_calls": [{"id": "x", "type": "function",
                              "function": {"name": "bash", "arguments": json.dumps({"command": "ls -la"})}}]}
    nxt = chat_prompt_ids(builtin_tokenizer, messages + [echoed, {"role": "tool", "tool_call_id": "x",
                                                                  "content": "a.py"}], TOOLS)
    assert nxt[: len(prompt) + len(completion)] == prompt + completion


def test_load_tokenizer_reads_a_local_folder(tmp_path, builtin_tokenizer):
    folder = tmp_path / "tok"
    shutil.copytree(TOKENIZER_DIR, folder)
    tok = load_tokenizer(folder)
    text = render_chat(tok, [{"role": "user", "content": "hi"}], TOOLS)
    assert encode_text(tok, text) == encode_text(builtin_tokenizer, text)


def test_load_tokenizer_rejects_a_file_path(tmp_path):
    f = tmp_path / "not-a-folder.json"
    f.write_text("{}")
    with pytest.raises(FileNotFoundError, match="not-a-folder.json"):
        load_tokenizer(f)
