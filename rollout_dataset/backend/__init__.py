"""The local vLLM-compatible backend: chat template, bigram logprob model, policies, and an HTTP
server that a client cannot tell from vLLM's OpenAI server. Tokenizers (the built-in one included)
are loaded and applied by `rollout_dataset.tokenizers`.

Public API:
    create_backend_app(tokenizer="builtin", policy="echo", served_model_name="local", ...)
    LocalBackend(...)            async context manager; `.start_in_thread()` for sync code
    run_backend_in_thread(...)   context manager running a LocalBackend in a thread
    make_policy(name, **kw), register_policy(name, factory), unregister_policy(name), PolicyRequest, PolicyOutput, ToolCallSpec
    BigramModel, bigram_for_tokenizer(tokenizer)
"""

from __future__ import annotations

from rollout_dataset.backend.app import create_backend_app
from rollout_dataset.backend.bigram import BigramModel, bigram_for_tokenizer
from rollout_dataset.backend.hermes import parse_tool_calls
from rollout_dataset.backend.policies import (
    EchoPolicy,
    Policy,
    PolicyOutput,
    PolicyRequest,
    ScriptPolicy,
    ToolCallSpec,
    available_policies,
    load_script,
    make_policy,
    register_policy,
    unregister_policy,
)
from rollout_dataset.backend.server import LocalBackend, run_backend_in_thread
from rollout_dataset.backend.template import CHAT_TEMPLATE, SPECIAL_TOKENS, render_assistant_text

__all__ = [
    "create_backend_app",
    "LocalBackend",
    "run_backend_in_thread",
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "render_assistant_text",
    "parse_tool_calls",
    "BigramModel",
    "bigram_for_tokenizer",
    "Policy",
    "PolicyRequest",
    "PolicyOutput",
    "ToolCallSpec",
    "EchoPolicy",
    "ScriptPolicy",
    "load_script",
    "make_policy",
    "register_policy",
    "available_policies",
    "unregister_policy",
]
