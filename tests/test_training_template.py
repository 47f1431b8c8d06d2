"""The dataset ships its chat template with {% generation %} markers, so assistant-only SFT works with
TRL as it is: the training template renders every conversation exactly as the real one, its assistant
mask covers each assistant turn and nothing else, and a template of an unknown shape gets none.

The default tier checks the markers with transformers' `apply_chat_template`; TRL's SFTTrainer on the
training template (the card's SFT-on-conversations recipe, training on exactly the tokens the loss mask
marks) is in tests/test_training_recipes.py's opt-in `trl` tier."""

from __future__ import annotations

import json

import datasets
import pytest
from transformers import AutoTokenizer

from rollout_dataset.builder import build
from rollout_dataset.builder.tokenizer_files import resolve_tokenizer_files
from rollout_dataset.builder.training_template import TRAINING_TEMPLATE_FILE, with_generation_markers
from rollout_dataset.tokenizers import BUILTIN_TOKENIZER_DIR
from support.genuine_templates import qwen3_tokenizer_dir
from support.synthetic_dataset import write_synthetic_rollout

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
CONVERSATIONS = {
    "plain": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    "system-tools-calls": [
        {"role": "system", "content": "You fix code."}, {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}},
            {"type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"cat a.py\"}"}}]},
        {"role": "tool", "content": "a.py"}, {"role": "tool", "content": "print(1)"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "bash", "arguments": {"command": "pytest"}}}]},
        {"role": "tool", "content": "1 passed"}, {"role": "assistant", "content": "Done."}],
    "developer-reasoning-parts": [
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
        {"role": "assistant", "reasoning_content": "add them", "content": "4"},
        {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6\n"}],
}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(str(BUILTIN_TOKENIZER_DIR))


@pytest.fixture(scope="module")
def training_template(tokenizer):
    marked = with_generation_markers(tokenizer.chat_template)
    assert marked is not None and marked != tokenizer.chat_template
    return marked


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("training-template")
    for seed in range(2):
        write_synthetic_rollout(root / "in" / f"r{seed}", n_turns=3, context_tokens=200, seed=seed)
    build([root / "in"], root / "ds")
    return root / "ds"


def _both(tokenizer, template, messages, **kwargs):
    real = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    return real, tokenizer.apply_chat_template(messages, tokenize=False, chat_template=template, **kwargs)


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("options", [{}, {"tools": TOOLS}, {"add_generation_prompt": True},
                                     {"add_generation_prompt": True, "enable_thinking": False}],
                         ids=["bare", "tools", "generation-prompt", "no-thinking"])
def test_the_training_template_renders_each_conversation_byte_for_byte_as_the_real_one(tokenizer, training_template,
                                                                                        name, options):
    real, training = _both(tokenizer, training_template, CONVERSATIONS[name], **options)
    assert training == real


def test_the_training_template_renders_the_dataset_s_own_conversations_as_the_real_one(dataset):
    stored = AutoTokenizer.from_pretrained(str(dataset / "tokenizer"))
    template = (dataset / "tokenizer" / TRAINING_TEMPLATE_FILE).read_text(encoding="utf-8")
    rows = datasets.load_dataset(str(dataset), "conversations", split="train")
    assert len(rows) > 0
    for row in rows:
        tools = json.loads(row["tools"] or "null")
        real, training = _both(stored, template, row["messages"], tools=tools)
        assert training == real


def test_the_assistant_mask_covers_each_assistant_turn_and_its_end_token_only(tokenizer, training_template):
    messages = CONVERSATIONS["system-tools-calls"]
    out = tokenizer.apply_chat_template(messages, tools=TOOLS, chat_template=training_template, return_dict=True,
                                        return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    spans, current = [], []
    for token, live in zip(ids, mask):
        if live:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    assert spans == [
        'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "bash", "arguments": {"command": "cat a.py"}}\n</tool_call><|im_end|>',
        '<tool_call>\n{"name": "bash", "arguments": {"command": "pytest"}}\n</tool_call><|im_end|>',
        "Done.<|im_end|>"]


def test_a_template_of_an_unknown_shape_gets_no_training_template():
    qwen3 = qwen3_tokenizer_dir()
    qwen3_template = json.loads((qwen3 / "tokenizer_config.json").read_text())["chat_template"]
    assert "<|im_start|>" in qwen3_template  # ChatML, but its assistant turn is written in pieces
    assert with_generation_markers(qwen3_template) is None
    llama_like = ("{% for m in messages %}{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + m.content "
                  "+ '<|eot_id|>' }}{% endfor %}")
    assert with_generation_markers(llama_like) is None
    assert TRAINING_TEMPLATE_FILE not in resolve_tokenizer_files(str(qwen3)).files


def test_the_build_stores_the_training_template_beside_the_real_one(dataset, training_template):
    stored = dataset / "tokenizer"
    assert (stored / "chat_template.jinja").read_bytes() == (BUILTIN_TOKENIZER_DIR / "chat_template.jinja").read_bytes()
    assert (stored / TRAINING_TEMPLATE_FILE).read_text(encoding="utf-8") == training_template
