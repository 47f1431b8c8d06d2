"""A copy of the captures' chat template with ``{% generation %}`` markers, for assistant-only SFT.

TRL's ``SFTTrainer(..., args=SFTConfig(assistant_only_loss=True))`` (and transformers'
``apply_chat_template(..., return_assistant_tokens_mask=True)``) find the assistant's tokens through
``{% generation %}`` ... ``{% endgeneration %}`` blocks in the chat template; most model templates
have none, so TRL refuses ``assistant_only_loss`` and SFT on `conversations` puts the loss on every
token (system prompt and tool output included). The build stores, next to the tokenizer's own
template, `TRAINING_TEMPLATE_FILE`: the same template with the markers added around each assistant
turn (its reasoning, content and tool calls, and the end-of-turn token; not the role header and not
the newline after the end token, which the model never samples). The markers print nothing, so the
training template renders every conversation byte for byte as the real one does (tested).

Markers are added only where the template's shape is known: a ChatML template (``<|im_start|>``,
``<|im_end|>``) whose assistant branch writes the header ``'<|im_start|>assistant\\n'`` as one literal
and closes with ``'<|im_end|>\\n'`` (the built-in tokenizer's and templates written like it). For
any other template `with_generation_markers` returns None and no training template is stored (the
card then says so): a wrong guess would train on the wrong tokens silently.
"""

from __future__ import annotations

import json
import re

__all__ = ["TRAINING_TEMPLATE_FILE", "with_generation_markers", "training_template_of"]

#: the file the build stores in the dataset's ``tokenizer/`` folder (beside ``chat_template.jinja``).
TRAINING_TEMPLATE_FILE = "chat_template_training.jinja"

_ASSISTANT_BRANCH = re.compile(r"\{%-?\s*(?:el)?if\s+\w+(?:\.role|\[['\"]role['\"]\])\s*==\s*['\"]assistant['\"]\s*-?%\}")
_HEADER = re.compile(r"\{\{-?\s*'<\|im_start\|>assistant\\n'\s*-?\}\}")
_END = re.compile(r"\{\{-?\s*'<\|im_end\|>\\n'\s*-?\}\}")
_MARKED = re.compile(r"\{%-?\s*generation\s*-?%\}")


def with_generation_markers(template: str) -> str | None:
    """The template with ``{% generation %}`` around the assistant turn, or None for an unknown shape.

    Args:
        template: a chat template (Jinja source).

    Returns:
        The marked template (the template itself when it already has markers), or None when its
        shape is not one this function knows (see the module docstring).
    """
    if _MARKED.search(template):
        return template
    branches = list(_ASSISTANT_BRANCH.finditer(template))
    if len(branches) != 1:
        return None
    branch = branches[0].end()
    header = _HEADER.search(template, branch)
    if header is None:
        return None
    end = _END.search(template, header.end())
    if end is None:
        return None
    return (template[:header.end()] + "{%- generation -%}" + template[header.end():end.start()]
            + "{{- '<|im_end|>' -}}{%- endgeneration -%}{{- '\\n' -}}" + template[end.end():])


def training_template_of(files: dict[str, bytes]) -> bytes | None:
    """The training template of a tokenizer's files (``chat_template.jinja``, else the config's string).

    Args:
        files: file name -> bytes, as the build stores them.

    Returns:
        The marked template's bytes, or None when the tokenizer has no template or one of an unknown shape.
    """
    if TRAINING_TEMPLATE_FILE in files:
        return files[TRAINING_TEMPLATE_FILE]
    template: object = None
    if "chat_template.jinja" in files:
        template = files["chat_template.jinja"].decode("utf-8", errors="replace")
    elif "tokenizer_config.json" in files:
        try:
            template = json.loads(files["tokenizer_config.json"]).get("chat_template")
        except (ValueError, AttributeError):
            template = None
    marked = with_generation_markers(template) if isinstance(template, str) else None
    return marked.encode("utf-8") if marked is not None else None
