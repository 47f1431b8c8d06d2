"""Harnesses that drive a model through the recording proxy.

- `BuiltinAgent`: the built-in tool-calling coding agent (tools `write_file`, `read_file`, `run`,
  `run_examples`, `submit`; manifest on every call; stops on submit, turn budget or timeout).
- `ChatAgentBase`, `ChatTurnClient`: the settings, requests and the one-assistant-turn call shared
  by the built-in agents (the coding agent and the Crafter agent).
- `run_external_harness`: any CLI agent (`--harness cmd:"..."`) with its OpenAI base URL pointed at
  the proxy; presets for mini-swe-agent and opencode.

Every harness leaves its answer in `solution.py` in its working directory (`SOLUTION_FILE`).
"""

from rollout_dataset.harness.builtin import DEFAULT_SYSTEM_PROMPT, AgentResult, BuiltinAgent
from rollout_dataset.harness.chat import ChatAgentBase, ChatTurn, ChatTurnClient
from rollout_dataset.harness.codex import codex_preset, find_codex
from rollout_dataset.harness.external import ExternalResult, run_external_harness, substitute_placeholders
from rollout_dataset.harness.presets import (
    HarnessPreset,
    find_mini,
    find_opencode,
    mini_swe_agent_preset,
    opencode_preset,
    resolve_harness,
)
from rollout_dataset.harness.tools import (
    SOLUTION_FILE,
    TOOL_NAMES,
    CommandResult,
    ToolBox,
    ToolOutcome,
    outputs_match,
    subprocess_runner,
    tool_manifest,
)

__all__ = [
    "AgentResult",
    "BuiltinAgent",
    "ChatAgentBase",
    "ChatTurn",
    "ChatTurnClient",
    "CommandResult",
    "DEFAULT_SYSTEM_PROMPT",
    "ExternalResult",
    "HarnessPreset",
    "SOLUTION_FILE",
    "codex_preset",
    "find_codex",
    "TOOL_NAMES",
    "ToolBox",
    "ToolOutcome",
    "find_mini",
    "find_opencode",
    "mini_swe_agent_preset",
    "opencode_preset",
    "outputs_match",
    "resolve_harness",
    "run_external_harness",
    "subprocess_runner",
    "substitute_placeholders",
    "tool_manifest",
]
