"""Ready-made external harness commands: mini-swe-agent and opencode, pointed at the proxy.

Each preset is a command template plus environment (both may use the `{base_url}`, `{model}`,
`{task_file}`, `{workdir}` placeholders of `rollout_dataset.harness.external`). `--harness
mini-swe-agent` and `--harness opencode` use them; `--harness cmd:"..."` runs anything else.

- mini-swe-agent (PyPI `mini-swe-agent`, litellm underneath): non-streaming, one `bash` tool;
  `LITELLM_LOCAL_MODEL_COST_MAP=True` keeps litellm off the network, `MSWEA_CONFIGURED=true`
  skips its first-run wizard, `MSWEA_COST_TRACKING=ignore_errors` accepts a model with no price.
- opencode (npm `opencode-ai`): `opencode run` headless, configured through
  `OPENCODE_CONFIG_CONTENT` with an OpenAI-compatible provider whose baseURL is the proxy; the API
  key is read from `OPENAI_API_KEY` by opencode itself (`{env:...}`), never written into config.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from rollout_dataset.harness.preset_base import HarnessPreset, find_npm_tool, tool_folder

__all__ = ["HarnessPreset", "tool_folder", "PRESETS", "CONTEXT_AWARE_PRESETS", "find_mini", "find_npm_tool", "find_opencode", "mini_swe_agent_preset", "opencode_preset", "resolve_harness"]

def find_opencode() -> str | None:
    """Locate the opencode binary: `OPENCODE_BIN`, the repo's `.npm-tools`, or PATH.

    Returns:
        The path, or None when opencode is not installed (`make npm-tools` installs it).
    """
    return find_npm_tool("opencode", "OPENCODE_BIN")


def find_mini() -> str:
    """Locate mini-swe-agent's `mini` executable: next to this Python, else on PATH.

    Returns:
        Its path, or ``"mini"`` to let the shell search.
    """
    sibling = Path(sys.executable).parent / "mini"
    return str(sibling) if sibling.is_file() else (shutil.which("mini") or "mini")


def mini_swe_agent_preset(mini_bin: str | None = None, step_limit: int = 30) -> HarnessPreset:
    """The mini-swe-agent preset.

    Args:
        mini_bin: the `mini` executable (default: `find_mini()`).
        step_limit: the agent's own step limit.

    Returns:
        The preset.
    """
    mini_bin = mini_bin or find_mini()
    command = (f"{mini_bin} -m openai/{{model}} -c mini.yaml -c model.model_kwargs.api_base={{base_url}} "
               f"-c model.model_kwargs.api_key=\"$OPENAI_API_KEY\" -c agent.step_limit={int(step_limit)} "
               "-l 0 -t \"$(cat {task_file})\" --yolo --exit-immediately -o \"$HOME/trajectory.json\"")
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "MSWEA_CONFIGURED": "true",
           "MSWEA_COST_TRACKING": "ignore_errors", "MSWEA_SILENT_STARTUP": "1"}
    return HarnessPreset("mini-swe-agent", command, env)


def opencode_preset(opencode_bin: str | None = None, *, title: bool = True,
                    context_tokens: int | None = None, output_tokens: int | None = None) -> HarnessPreset:
    """The opencode preset.

    Args:
        opencode_bin: the opencode executable (default: `find_opencode()` or `opencode`).
        title: keep opencode's toolless title-generation call (its real behaviour).
        context_tokens: the model's context length, written into opencode's model ``limit`` so its
            own compaction starts before the context is full (None: opencode's default).
        output_tokens: the output limit opencode asks for (its model ``limit.output``).

    Returns:
        The preset.
    """
    binary = opencode_bin or find_opencode() or "opencode"
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"rollout": {"npm": "@ai-sdk/openai-compatible", "name": "rollout proxy",
                                 "options": {"baseURL": "{base_url}", "apiKey": "{env:OPENAI_API_KEY}"},
                                 "models": {"{model}": _opencode_model(context_tokens, output_tokens)}}},
        "model": "rollout/{model}",
        "permission": {"edit": "allow", "bash": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }
    if not title:
        config["agent"] = {"title": {"disable": True}}
    env = {"OPENCODE_CONFIG_CONTENT": json.dumps(config), "OPENCODE_DISABLE_AUTOUPDATE": "true",
           "OPENCODE_DISABLE_LSP_DOWNLOAD": "true", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true"}
    command = f"{binary} run --model rollout/{{model}} \"$(cat {{task_file}})\""
    folder = tool_folder(binary)
    return HarnessPreset("opencode", command, env, (folder,) if folder else ())


def _opencode_model(context_tokens: int | None, output_tokens: int | None) -> dict:
    """opencode's model entry; ``limit`` needs both numbers (its config schema).

    opencode compacts its history once it exceeds ``context - output``, so the output limit is at
    most a quarter of the context: a larger one (its default 32000 on a 24k context) leaves no
    room for its own ~10k-token prompt and it compacts on every turn.
    """
    model: dict = {"name": "{model}"}
    if context_tokens:
        quarter = max(1, int(context_tokens) // 4)
        output = min(int(output_tokens), quarter) if output_tokens else quarter
        model["limit"] = {"context": int(context_tokens), "output": output}
    return model


PRESETS = ("mini-swe-agent", "opencode", "codex", "claude-code", "terminus-2")
#: presets whose config takes the model's context and output limits (`resolve_harness(..., context_tokens=)`)
CONTEXT_AWARE_PRESETS = ("opencode", "codex", "claude-code")


def resolve_harness(spec: str, *, context_tokens: int | None = None,
                    output_tokens: int | None = None) -> HarnessPreset | None:
    """Turn a `--harness` value into a preset (None for the built-in harness).

    Args:
        spec: ``builtin``, ``cmd:COMMAND``, ``mini-swe-agent``, ``opencode``, ``codex``, ``claude-code``,
            ``terminus-2`` or ``harbor:NAME`` (a Harbor installed agent).
        context_tokens: the model's context length, for presets that configure it (opencode, codex).
        output_tokens: the output limit to configure (opencode, codex).

    Returns:
        The preset to run, or None for ``builtin``.

    Raises:
        ValueError: an unknown harness or an empty command.
    """
    if spec == "builtin":
        return None
    if spec.startswith("cmd:"):
        command = spec[4:].strip()
        if len(command) >= 2 and command[0] == command[-1] and command[0] in "\"'":
            command = command[1:-1]
        if not command:
            raise ValueError("--harness cmd: needs a command, e.g. cmd:\"mini -t ...\"")
        return HarnessPreset("cmd", command)
    if spec.startswith("harbor:"):
        from rollout_dataset.harbor.installed import installed_agent

        installed_agent(spec)  # ValueError naming the valid agents
        return HarnessPreset(spec, "")  # Harbor runs it in the task's container (recipes.coding.env)
    if spec == "mini-swe-agent":
        return mini_swe_agent_preset()
    if spec == "opencode":
        return opencode_preset(context_tokens=context_tokens, output_tokens=output_tokens)
    if spec == "codex":
        from rollout_dataset.harness.codex import codex_preset

        return codex_preset(context_tokens=context_tokens, output_tokens=output_tokens)
    if spec == "claude-code":
        from rollout_dataset.harness.claude_code import claude_code_preset

        return claude_code_preset(context_tokens=context_tokens, output_tokens=output_tokens)
    if spec == "terminus-2":  # Harbor runs it (rollout_dataset.harbor.adapter); the command is for the record
        return HarnessPreset("terminus-2", "harbor trials start --agent terminus-2 --env "
                                           "rollout_dataset.harbor.bwrap_environment:BwrapEnvironment")
    raise ValueError(f"unknown --harness {spec!r}; use builtin, cmd:\"...\", {' or '.join(PRESETS)}")
