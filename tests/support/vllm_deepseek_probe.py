"""Run vLLM's own `deepseek_r1` + `deepseek_v3` parsers over sampled ids (a script for vLLM's Python).

    REAL_VLLM_PYTHON probe.py TOKENIZER_DIR CASES.json  ->  JSON on stdout

Each case is `{"name", "ids"}` (the sampled ids, the eos last). For each: the message vLLM 0.32's chat
endpoint builds from the whole reply (`reasoning`, `content`, `tool_calls` as name/arguments pairs,
with `tool_choice: auto`) and the wire delta of each token streamed one per chunk (`null` where vLLM
sends no delta), as `vllm.parser.parser_manager` composes the two parsers for `vllm serve`.
Used by tests/test_real_vllm_deepseek_tools.py; it runs in vLLM's interpreter, not the project's.
"""

from __future__ import annotations

import json
import sys

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
PROMPT = "<｜User｜>run it<｜Assistant｜>"


def main() -> None:
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
    cases = json.loads(open(sys.argv[2], encoding="utf-8").read())
    parser_cls = ParserManager.get_parser(tool_parser_name="deepseek_v3", reasoning_parser_name="deepseek_r1",
                                          enable_auto_tools=True, tokenizer=tokenizer)
    eos = tokenizer.eos_token_id
    out = []
    for case in cases:
        ids = case["ids"]
        request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "run it"}], tools=TOOLS)
        text = tokenizer.decode([i for i in ids if i != eos], skip_special_tokens=False)
        reasoning, content, calls = parser_cls(tokenizer, request.tools).parse(
            text, request, enable_auto_tools=True, model_output_token_ids=ids)
        message = {"reasoning": reasoning, "content": content,
                   "tool_calls": [[c.name, c.arguments] for c in calls or []]}
        parser = parser_cls(tokenizer, request.tools)
        prompt = tokenizer.encode(PROMPT, add_special_tokens=False)
        deltas, before = [], ""
        for k, token in enumerate(ids):
            now = tokenizer.decode([i for i in ids[: k + 1] if i != eos], skip_special_tokens=False)
            delta = parser.parse_delta(now[len(before):], [token], request, prompt_token_ids=prompt,
                                       finished=k == len(ids) - 1)
            before = now
            deltas.append(None if delta is None else json.loads(delta.model_dump_json(exclude_unset=True)))
        out.append({"name": case["name"], "message": message, "deltas": deltas})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
