"""The Claude Code preset (`--harness claude-code`): Anthropic's Claude Code (npm
`@anthropic-ai/claude-code`, whose native linux-x64 binary comes in `@anthropic-ai/claude-code-linux-x64`)
run headless with `claude -p`, over the Anthropic Messages API.

Claude Code speaks `/v1/messages` (always streamed, as `/v1/messages?beta=true`); the recording
proxy sends each call to vLLM as a chat completion and records it token-exact
(`rollout_dataset.proxy.messages_capture`). The preset runs it unchanged inside the capture's sandbox
with an isolated HOME and:

- `ANTHROPIC_BASE_URL`: the proxy's session URL without its ``/v1`` (Claude Code appends ``/v1/messages``);
- `ANTHROPIC_AUTH_TOKEN`: the dummy per-rollout key the harness gets (`OPENAI_API_KEY`); the real
  upstream key stays in the proxy;
- `ANTHROPIC_MODEL` and `ANTHROPIC_SMALL_FAST_MODEL`: the served model (the small-model auxiliary
  calls go to it too, and are recorded as auxiliary calls);
- `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`, `DISABLE_TELEMETRY=1`, `DISABLE_AUTOUPDATER=1`,
  `DISABLE_ERROR_REPORTING=1`: no traffic but the model calls;
- `CLAUDE_CODE_MAX_OUTPUT_TOKENS` and `CLAUDE_CODE_MAX_CONTEXT_TOKENS` from the server's
  `max_model_len` when the capture knows it (else Claude Code asks `max_tokens` 32000, which an
  8k-context vLLM refuses);
- `IS_SANDBOX=1` and `--dangerously-skip-permissions`: the capture's own sandbox isolates the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for annotations only; imported lazily where used
    from rollout_dataset.harness.preset_base import HarnessPreset

import shlex

__all__ = ["CLAUDE_CODE_VERSION", "find_claude_code", "claude_code_env", "claude_code_preset"]

#: the Claude Code version the Makefile installs and the tests drive
CLAUDE_CODE_VERSION = "2.1.328"


def find_claude_code() -> str | None:
    """Locate the claude binary: `CLAUDE_CODE_BIN`, the repo's `.npm-tools`, or PATH.

    Returns:
        The path, or None when Claude Code is not installed (`make npm-tools` installs it).
    """
    from rollout_dataset.harness.preset_base import find_npm_tool

    return find_npm_tool("claude", "CLAUDE_CODE_BIN")


def claude_code_env(context_tokens: int | None = None, output_tokens: int | None = None) -> dict[str, str]:
    """Claude Code's environment (templates: `{model}` is the served model).

    Args:
        context_tokens: the model's context length (None: Claude Code's defaults).
        output_tokens: the output limit (default a quarter of the context).

    Returns:
        The variables.
    """
    env = {"ANTHROPIC_MODEL": "{model}", "ANTHROPIC_SMALL_FAST_MODEL": "{model}",
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": "{model}",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
           "DISABLE_ERROR_REPORTING": "1", "IS_SANDBOX": "1"}
    if context_tokens:
        quarter = max(1, int(context_tokens) // 4)
        output = min(int(output_tokens), quarter) if output_tokens else quarter
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(output)
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(int(context_tokens))
    elif output_tokens:
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(int(output_tokens))
    return env


def claude_code_preset(claude_bin: str | None = None, *, context_tokens: int | None = None,
                       output_tokens: int | None = None) -> HarnessPreset:
    """The Claude Code preset.

    Args:
        claude_bin: the claude executable (default: `find_claude_code()` or `claude`).
        context_tokens: the model's context length, written into Claude Code's limits.
        output_tokens: the output limit Claude Code asks for.

    Returns:
        The `HarnessPreset`.
    """
    from rollout_dataset.harness.preset_base import HarnessPreset, tool_folder

    binary = claude_bin or find_claude_code() or "claude"
    env = claude_code_env(context_tokens, output_tokens)
    # the limits go in the command: the sandbox drops variables whose names look like secrets (*TOKEN*)
    limits = "".join(f"{name}={env.pop(name)} " for name in ("CLAUDE_CODE_MAX_OUTPUT_TOKENS",
                                                                "CLAUDE_CODE_MAX_CONTEXT_TOKENS") if name in env)
    command = ('ANTHROPIC_BASE_URL="${OPENAI_BASE_URL%/v1}" ANTHROPIC_AUTH_TOKEN="$OPENAI_API_KEY" ' + limits +
               f'{shlex.quote(binary)} -p --model {{model}} --dangerously-skip-permissions --output-format text '
               '"$(cat {task_file})"')
    folder = tool_folder(binary)  # the npm prefix holding Claude Code's native binary, read-only in the sandbox
    return HarnessPreset("claude-code", command, env, (folder,) if folder else ())
